import type { Command } from '../command.ts';
import { authCommands } from './auth.ts';
import { clusterCommands } from './clusters.ts';
import { completeCommand, completionCommand } from './completion.ts';
import { datasetCommands } from './datasets.ts';
import { endpointCommands } from './endpoints.ts';
import { hostCommands } from './hosts.ts';
import { jobCommands } from './jobs.ts';
import { keyCommands } from './keys.ts';
import { logCommands } from './logs.ts';
import { sshCommands } from './ssh.ts';

/** Every command, in the order `anvil --help` lists them. */
export const COMMANDS: readonly Command[] = [
  ...authCommands,
  ...clusterCommands,
  ...sshCommands,
  ...logCommands,
  ...endpointCommands,
  ...jobCommands,
  ...datasetCommands,
  ...keyCommands,
  ...hostCommands,
  completionCommand,
  completeCommand(() => COMMANDS),
];

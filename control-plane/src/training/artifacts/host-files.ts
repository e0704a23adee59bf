import type { Socket } from 'node:net';
import type { CommandBody, FileStat, TunnelTarget } from '@anvil/shared/protocol';

/** How long an agent has to look at a file (hashing a large one the first time included). */
const STAT_TIMEOUT_MS = 120_000;

type FileTarget = Omit<Extract<TunnelTarget, { kind: 'file' }>, 'kind'>;

/**
 * Files of a workload's volume on its host, through its agent: look at one, delete one, stream its bytes
 * (a file tunnel). Errors are the gateway's and the tunnels' ApiErrors (HOST_NOT_CONNECTED, AGENT_*).
 */
export interface HostFiles {
  stat(hostId: string, workloadId: string, path: string, hash: boolean): Promise<FileStat>;
  remove(hostId: string, workloadId: string, path: string): Promise<{ removed: boolean; sizeBytes: number }>;
  open(workloadId: string, target: FileTarget): Promise<Socket>;
}

export function agentHostFiles(deps: {
  agents: { sendCommand(hostId: string, command: CommandBody, timeoutMs?: number): Promise<unknown> };
  tunnels: { openFile(workloadId: string, target: FileTarget): Promise<Socket> };
}): HostFiles {
  return {
    async stat(hostId, workloadId, path, hash) {
      return (await deps.agents.sendCommand(
        hostId,
        { name: 'stat_file', workloadId, path, hash },
        STAT_TIMEOUT_MS,
      )) as FileStat;
    },
    async remove(hostId, workloadId, path) {
      return (await deps.agents.sendCommand(hostId, { name: 'delete_file', workloadId, path })) as {
        removed: boolean;
        sizeBytes: number;
      };
    },
    open: (workloadId, target) => deps.tunnels.openFile(workloadId, target),
  };
}

import { type ChildProcess, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { REPO_ROOT } from '../../control-plane/src/testing/index.ts';
import { tempDir } from '../agent/harness.ts';
import { TEST_HOST_IMAGES } from '../fixtures/images/busybox.ts';
import { waitFor } from './wait.ts';

/** The agent daemon as `npm run agent` runs it: its own Node process, its own state directory. */
export interface AgentProcess {
  child: ChildProcess;
  stateDir: string;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
  /** The host id from the saved credential, once the agent registered. */
  hostId(): Promise<string>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
  /** The last log messages, one line each, for failure messages. */
  summary(lines?: number): string;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export async function spawnAgent(options: {
  controlPlaneUrl: string;
  joinToken?: string | null;
  stateDir?: string;
  dockerHost?: string;
  env?: Record<string, string>;
  /** Node options before the script (e.g. --cpu-prof, which NODE_OPTIONS does not take). */
  nodeFlags?: string[];
}): Promise<AgentProcess> {
  const stateDir = options.stateDir ?? (await tempDir('anvil-fleet-agent-'));
  const env: Record<string, string> = {
    PATH: process.env['PATH'] ?? '',
    HOME: process.env['HOME'] ?? '/tmp',
    ANVIL_CONTROL_PLANE: options.controlPlaneUrl,
    ANVIL_STATE_DIR: stateDir,
    ANVIL_SIMULATE_GPUS: '2xH100',
    ANVIL_LOG_LEVEL: 'info',
    ANVIL_HOST_IMAGES: TEST_HOST_IMAGES.join(','),
    ...(options.joinToken ? { ANVIL_JOIN_TOKEN: options.joinToken } : {}),
    ...(options.dockerHost ? { DOCKER_HOST: options.dockerHost } : {}),
    ...options.env,
  };
  const argv = [...(options.nodeFlags ?? []), '--import', 'tsx', 'agent/src/main.ts'];
  const child = spawn(process.execPath, argv, {
    cwd: REPO_ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(code ?? (signal ? -1 : null));
    }),
  );
  return {
    child,
    stateDir,
    stdout: () => out,
    stderr: () => err,
    exited,
    async hostId() {
      return waitFor(
        'the agent to save its host credential',
        async () => {
          if (child.exitCode !== null)
            throw new Error(`agent exited ${child.exitCode}: ${err}${out.slice(-2000)}`);
          const text = await readFile(join(stateDir, 'credential.json'), 'utf8').catch(() => null);
          return text ? (JSON.parse(text) as { hostId: string }).hostId : null;
        },
        // Starting Node and tsx and gathering an inventory takes minutes on a saturated machine.
        180_000,
      );
    },
    summary(lines = 15) {
      const tail = out
        .trim()
        .split('\n')
        .slice(-lines)
        .map((line) => {
          try {
            const j = JSON.parse(line) as Record<string, unknown>;
            const extra = ['err', 'code', 'reason', 'error'].map((k) => j[k]).filter((v) => v !== undefined);
            return `${new Date(j['time'] as number).toISOString()} ${j['msg']} ${extra.join(' ')}`;
          } catch {
            return line;
          }
        });
      return `agent log:\n${tail.join('\n')}\nagent stderr: ${err}`;
    },
    async kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** Containers an agent made for `hostId` in one engine: workload id -> container ids. */
export async function anvilContainers(
  docker: Dockerode,
  hostId: string,
): Promise<{ workload: string; id: string; state: string }[]> {
  const list = await docker.listContainers({
    all: true,
    filters: { label: ['anvil.managed=true', `anvil.host=${hostId}`] },
  });
  return list
    .map((c) => ({ workload: c.Labels['anvil.workload'] ?? '', id: c.Id, state: c.State }))
    .sort((a, b) => a.workload.localeCompare(b.workload));
}

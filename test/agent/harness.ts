import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { pino } from 'pino';
import { type Agent, type AgentOptions, createAgent } from '../../agent/src/agent.ts';
import { createContainerRuntime } from '../../agent/src/docker/runtime.ts';
import { createGpuProvider } from '../../agent/src/gpu/provider.ts';
import { systemHost } from '../../agent/src/host/provider.ts';
import { TEST_HOST_IMAGES } from '../fixtures/images/busybox.ts';

export interface RunningAgent {
  agent: Agent;
  stateDir: string;
  /** Settles when run() ends: resolves after stop(), rejects on a fatal refusal. */
  done: Promise<void>;
  stop(): Promise<void>;
}

export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

/** An in-process agent against real Docker, with simulated GPUs and test-sized timings. */
export async function startAgent(
  docker: Dockerode,
  options: { controlPlaneUrl: string; joinToken: string | null; stateDir?: string } & Partial<AgentOptions>,
): Promise<RunningAgent> {
  const stateDir = options.stateDir ?? (await tempDir('anvil-agent-state-'));
  const logger = pino({ level: process.env['ANVIL_TEST_LOG_LEVEL'] ?? 'silent' });
  const gpu = await createGpuProvider({ simulate: '2xH100', simulateSeed: stateDir, logger });
  const agent = createAgent({
    runtime: createContainerRuntime(docker),
    docker,
    gpu,
    host: systemHost,
    logger,
    volumeRoot: join(stateDir, 'volumes'),
    hostImages: TEST_HOST_IMAGES,
    backoff: { baseMs: 100, maxMs: 500 },
    resyncIntervalMs: 2_000,
    flushIntervalMs: 100,
    handshakeTimeoutMs: 5_000,
    ...options,
    stateDir,
  });
  const abort = new AbortController();
  const done = agent.run(abort.signal);
  done.catch(() => {});
  return {
    agent,
    stateDir,
    done,
    async stop() {
      abort.abort();
      await done;
    },
  };
}

import type Dockerode from 'dockerode';
import type { Logger } from 'pino';
import { systemHost } from '../../agent/src/host/provider.ts';
import type { Clock } from '../../control-plane/src/auth/clock.ts';
import { call } from '../../control-plane/src/testing/accounts.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/app.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { removeTestContainers, testDocker } from '../fixtures/images/docker.ts';

export { waitFor };

/** The control plane on loopback with one real agent (simulated 2xH100) running containers in Docker. */
export interface ClusterFleet {
  t: TestApp;
  docker: Dockerode;
  agent: RunningAgent;
  hostId: string;
  /** Stops the agent and the app, and removes the host's containers. */
  close(): Promise<void>;
}

export async function startClusterFleet(
  env: Record<string, string> = {},
  /** Loggers of the control plane and the agent (tests that read the logs); silent by default. */
  loggers: { controlPlane?: Logger; agent?: Logger } = {},
  /** The control plane's clock (a ShiftedClock: billing checked across time skipped ahead). */
  clock?: Clock,
): Promise<ClusterFleet> {
  const docker = testDocker();
  await ensureBusyboxImage(docker);
  const t = await createTestApp({
    env: { ANVIL_HEARTBEAT_SECONDS: '1', ANVIL_METRICS_SECONDS: '1', ...env },
    ...(loggers.controlPlane ? { logger: loggers.controlPlane } : {}),
    ...(clock ? { clock } : {}),
  });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const token = await call(t, { method: 'POST', url: '/v2/admin/hosts/join-tokens', payload: {} });
  if (token.statusCode !== 201) throw new Error(`join token: ${token.body}`);
  // Generous handshake: this machine's CPU is shared, and inventory gathering can be slow under load.
  const agent = await startAgent(docker, {
    controlPlaneUrl: `http://127.0.0.1:${port}`,
    joinToken: token.json().value,
    handshakeTimeoutMs: 60_000,
    host: memoizedHost(),
    ...(loggers.agent ? { logger: loggers.agent } : {}),
  });
  const hostId = await waitFor(
    'host ready',
    async () => {
      const host = await t.context.db.prisma.host.findFirst({ where: { state: 'ready', gpuCount: 2 } });
      return host?.id ?? null;
    },
    180_000,
  ).catch(async (error) => {
    // The caller never gets a fleet to close: leave nothing running.
    await agent.stop().catch(() => {});
    await t.close();
    throw error;
  });
  return {
    t,
    docker,
    agent,
    hostId,
    async close() {
      await agent.stop().catch(() => {});
      await t.close();
      await removeTestContainers(docker, `anvil.host=${hostId}`);
    },
  };
}

/**
 * The real host provider, its inventory gathered once: on this shared, loaded machine gathering it took
 * longer than the control plane's 15 s hello deadline, so every reconnect failed its handshake.
 */
export function memoizedHost(): typeof systemHost {
  let inventory: ReturnType<typeof systemHost.inventory> | null = null;
  return {
    inventory: () => {
      inventory ??= systemHost.inventory();
      return inventory;
    },
    sample: () => systemHost.sample(),
  };
}

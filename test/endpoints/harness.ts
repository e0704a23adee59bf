import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Dockerode from 'dockerode';
import type { AgentOptions } from '../../agent/src/agent.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { memoizedHost } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE, ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { removeTestContainers, testDocker } from '../fixtures/images/docker.ts';
import { FleetControlPlane } from '../fleet/control-plane.ts';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

/** The worker's command: the fixture script travels inside it (the agent mounts nothing from the test). */
export async function workerCommand(port = 8000): Promise<string[]> {
  const script = (await readFile(join(FIXTURES, 'worker.sh'))).toString('base64');
  return [
    'sh',
    '-c',
    // The shell stays PID 1 and ends on SIGTERM, as a real worker does: nc as PID 1 would ignore it, and
    // every stop would wait out the 10 s grace period before Docker kills it.
    `mkdir -p /srv && echo ${script} | base64 -d > /srv/worker.sh && chmod +x /srv/worker.sh && trap 'exit 0' TERM && { nc -ll -p ${port} -e /srv/worker.sh & wait; }`,
  ];
}

/** A worker of the RunPod protocol (fixtures/runpod-worker.sh), travelling inside its command as worker.sh does. */
export async function runpodWorkerCommand(): Promise<string[]> {
  const script = (await readFile(join(FIXTURES, 'runpod-worker.sh'))).toString('base64');
  return ['sh', '-c', `echo ${script} | base64 -d > /tmp/worker.sh && exec sh /tmp/worker.sh`];
}

/**
 * A real control plane over HTTP on loopback (restartable over the same database), and one in-process
 * agent against real Docker with simulated 2xH100 (the only fake). Worker containers are real busybox.
 */
export interface EndpointFleet {
  cp: FleetControlPlane;
  docker: Dockerode;
  agent: RunningAgent;
  hostId: string;
  /** Stops the agent; `startAgentAgain` brings the same host back (its state directory kept). */
  stopAgent(): Promise<void>;
  startAgentAgain(): Promise<void>;
  close(): Promise<void>;
}

export async function startEndpointFleet(
  env: Record<string, string> = {},
  agentOptions: Partial<AgentOptions> = {},
): Promise<EndpointFleet> {
  const docker = testDocker();
  await ensureBusyboxImage(docker);
  const cp = await FleetControlPlane.start({ env: { ANVIL_OUTBOUND_ALLOW_PRIVATE: 'true', ...env } });
  const joinToken = await cp.joinToken();
  const host = memoizedHost();
  const options = { controlPlaneUrl: cp.url, handshakeTimeoutMs: 60_000, host, ...agentOptions };
  let agent = await startAgent(docker, { ...options, joinToken });
  const hostId = await waitFor(
    'host ready',
    async () => {
      const row = await cp.context.db.prisma.host.findFirst({ where: { state: 'ready', gpuCount: 2 } });
      return row?.id ?? null;
    },
    180_000,
  );
  const fleet: EndpointFleet = {
    cp,
    docker,
    agent,
    hostId,
    async stopAgent() {
      await agent.stop();
    },
    async startAgentAgain() {
      agent = await startAgent(docker, { ...options, joinToken: null, stateDir: agent.stateDir });
      fleet.agent = agent;
    },
    async close() {
      await agent.stop().catch(() => {});
      await cp.close();
      await removeTestContainers(docker, `anvil.host=${hostId}`);
    },
  };
  return fleet;
}

export { BUSYBOX_IMAGE, waitFor };

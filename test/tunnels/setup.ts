import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { WorkloadSpec } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import type { WorkloadView } from '../../control-plane/src/fleet/workloads/workloads.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { workloadSpec } from '../agent/fixtures.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';

/** Polls `check` until it returns a value that is not false/null/undefined (30 s unless told). */
export function until<T>(what: string, check: () => T | Promise<T>, timeoutMs = 30_000) {
  return waitFor(what, check, timeoutMs);
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The real control plane (createTestApp: the app and context `npm start` builds) listening on loopback. */
export interface TunnelWorld {
  cp: TestApp;
  url: string;
  agent: RunningAgent;
  hostId: string;
  /** The agent's saved host credential. */
  credential: string;
  close(): Promise<void>;
}

export async function startWorld(docker: Dockerode): Promise<TunnelWorld> {
  const cp = await createTestApp({ env: { ANVIL_HEARTBEAT_SECONDS: '2', ANVIL_HOST_GRACE_SECONDS: '60' } });
  const url = await cp.app.listen({ host: '127.0.0.1', port: 0 });
  const { value } = await cp.context.fleet.joinTokens.create({ userId: cp.userId, keyId: null }, {});
  const agent = await startAgent(docker, { controlPlaneUrl: url, joinToken: value });
  const hostId = await until('registration', () => agent.agent.hostId);
  await until('agent connected', () => cp.context.fleet.agents.isConnectedHere(hostId));
  const saved = JSON.parse(await readFile(join(agent.stateDir, 'credential.json'), 'utf8')) as {
    credential: string;
  };
  return {
    cp,
    url,
    agent,
    hostId,
    credential: saved.credential,
    async close() {
      await agent.stop().catch(() => {});
      await cp.close();
    },
  };
}

/** A workload spec as the control plane takes it (the id is the control plane's to assign). */
function workloadSpecWithoutId(overrides: Partial<WorkloadSpec>): Omit<WorkloadSpec, 'workloadId'> {
  const { workloadId: _, ...spec } = workloadSpec('unassigned', overrides);
  return spec;
}

/** A running workload on the world's host, labelled for the test's cleanup. */
export async function runWorkload(
  world: TunnelWorld,
  command: string[],
  overrides: Partial<WorkloadSpec> = {},
): Promise<WorkloadView> {
  const workload = await world.cp.context.fleet.workloads.create({
    hostId: world.hostId,
    kind: 'cluster',
    ownerAccountId: world.cp.accountId,
    spec: workloadSpecWithoutId({ command, ...overrides }),
  });
  return until(`workload ${workload.id} running`, async () => {
    const view = await world.cp.context.fleet.workloads.get(workload.id);
    return view.phase === 'running' && view.actualStatus?.ipAddress ? view : null;
  });
}

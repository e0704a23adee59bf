import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { connectGpuAgent, type GpuTestAgent, realGpuInventory } from '../../testing/gpu-agent.ts';
import { waitFor } from '../../testing/wait.ts';

// The first test app of a process boots PGlite and compiles the schema: on a shared machine, minutes.
vi.setConfig({ testTimeout: 240_000 });

/**
 * POST /v1/clusters commits the cluster with its placement and workload in one transaction and answers
 * without waiting for the host's agent to be told (ClusterService.create): the desired set goes out after
 * the commit, on its own. A hand-driven agent over the real WebSocket; its push is held up in the secrets
 * spec resolver the desired set passes through (its read of the cluster's secrets), as a stalled
 * connection would hold it.
 */
describe('cluster create and the push to the agent', () => {
  let t: TestApp;
  let agent: GpuTestAgent;

  beforeAll(async () => {
    t = await createTestApp({ env: { ANVIL_HOST_GRACE_SECONDS: '3600' } });
    const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
    agent = await connectGpuAgent(
      t,
      url,
      realGpuInventory([{ name: 'NVIDIA H100 80GB HBM3' }, { name: 'NVIDIA H100 80GB HBM3' }], true),
    );
  });

  afterAll(async () => {
    agent?.close();
    await t?.close();
  });

  const desiredSets = () =>
    agent.received.filter((m) => m['type'] === 'desired_state') as {
      workloads: { workloadId: string; gpus: { index: number; uuid: string }[] }[];
    }[];

  it('answers 201 with the cluster placed on the host and GPUs while the push is stalled, then pushes it', async () => {
    let release: () => void = () => {};
    const stalled = new Promise<void>((resolve) => {
      release = resolve;
    });
    let pushes = 0;
    const secrets = t.context.secrets;
    const injectable = secrets.injectable.bind(secrets);
    vi.spyOn(secrets, 'injectable').mockImplementation(async (accountId, workloadId) => {
      pushes++;
      await stalled;
      return injectable(accountId, workloadId);
    });

    const created = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name: 'pushed-later', docker_image: 'busybox', gpu_type: 'H100', gpu_count: 1 },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().data.id as string;
    expect(created.json().data.status).toBe('starting');
    // Committed before the answer: the placement, and the workload with the GPU's UUID from the inventory.
    const cluster = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
    expect(cluster).toMatchObject({ hostId: agent.hostId, gpuIndices: [0], status: 'starting' });
    const workload = await t.context.db.prisma.workload.findUniqueOrThrow({ where: { id } });
    const uuid = agent.inventory.gpus.devices[0]!.uuid;
    expect(workload).toMatchObject({ hostId: agent.hostId, kind: 'cluster', desired: 'running' });
    expect((workload.spec as { gpus: unknown }).gpus).toEqual([{ index: 0, uuid }]);
    expect(await t.context.db.prisma.resource.findUnique({ where: { id } })).toMatchObject({
      type: 'cluster',
    });

    // The push began after the commit and is still held: the agent has not been told yet.
    await waitFor('the push to reach the stalled resolver', async () => pushes > 0 || null);
    expect(desiredSets().some((set) => set.workloads.some((w) => w.workloadId === id))).toBe(false);

    release();
    const set = await waitFor('the desired set with the cluster', async () =>
      desiredSets().find((s) => s.workloads.some((w) => w.workloadId === id)),
    );
    expect(set.workloads.find((w) => w.workloadId === id)?.gpus).toEqual([{ index: 0, uuid }]);
  });
});

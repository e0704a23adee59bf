import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

/**
 * Where a host cannot bound a workload's disk (overlay2 on ext4, the common case), its agent says so in
 * its inventory, and every cluster placed there says so too: storage_gb is measured, not enforced.
 */
describe('clusters say whether their host enforces storage_gb', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await createTestApp();
    await call(t, {
      method: 'POST',
      url: '/v2/auth/temporary-boost',
      payload: { multiplier: 10, duration: '1h', reason: 'tests' },
    });
  });
  afterAll(async () => t?.close());

  async function placeOn(hostId: string, name: string) {
    const created = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name, docker_image: 'busybox', gpu_type: 'H100', storage_gb: 20 },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().data.id as string;
    const row = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
    expect(row.hostId).toBe(hostId);
    return (await call(t, { url: `/v1/clusters/${id}` })).json().data;
  }

  it('reports the placed host’s disk quota capability, and null for an agent that does not say', async () => {
    const [host] = await insertSimulatedHosts(t.context.db, { prefix: 'q', count: 1, gpusPerHost: 1 });
    const row = await t.context.db.prisma.host.findUniqueOrThrow({ where: { id: host! } });
    // An agent from before tenant isolation reports nothing about disk quotas.
    expect((await placeOn(host!, 'unknown')).storage_quota).toBeNull();

    const inventory = row.inventory as Record<string, unknown>;
    await t.context.db.prisma.host.update({
      where: { id: host! },
      data: {
        inventory: {
          ...inventory,
          isolation: {
            network: { enforced: true, reason: null },
            diskQuota: { enforced: false, reason: 'overlay2 on extfs: no project quotas' },
          },
        } as never,
      },
    });
    const listed = (await call(t, { url: '/v1/clusters' })).json().data.clusters as {
      name: string;
      storage_quota: unknown;
    }[];
    expect(listed.find((c) => c.name === 'unknown')?.storage_quota).toEqual({
      enforced: false,
      reason: 'overlay2 on extfs: no project quotas',
    });
  });
});

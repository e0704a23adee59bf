import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addAccount, addMember, call } from '../../testing/accounts.ts';
import { clusterRow, createTestApp, type TestApp } from '../../testing/index.ts';

describe('GET /v2/admin/clusters', () => {
  let t: TestApp;

  beforeEach(async () => {
    t = await createTestApp();
  });
  afterEach(async () => {
    await t.close();
  });

  async function seed() {
    const other = await addAccount(t, 'Customer');
    const rows = [
      clusterRow({
        id: 'cluster_a',
        accountId: other.accountId,
        ownerId: other.userId,
        name: 'a',
        gpuCount: 2,
        gpuIndices: [0, 1],
        createdAt: new Date('2026-11-01T00:00:00Z'),
      }),
      clusterRow({
        id: 'cluster_b',
        accountId: other.accountId,
        ownerId: other.userId,
        name: 'b',
        status: 'pending',
        gpuCount: 4,
        queuedAt: new Date('2026-11-02T00:00:00Z'),
        createdAt: new Date('2026-11-02T00:00:00Z'),
      }),
      clusterRow({
        id: 'cluster_c',
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'c',
        status: 'stopped',
        gpuType: 'A100',
        createdAt: new Date('2026-11-03T00:00:00Z'),
      }),
      clusterRow({
        id: 'cluster_d',
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'd',
        status: 'deleted',
        createdAt: new Date('2026-11-04T00:00:00Z'),
      }),
    ];
    for (const data of rows) await t.context.db.prisma.cluster.create({ data });
    return other;
  }

  it("lists every account's clusters for operators, newest first, without deleted ones by default", async () => {
    const other = await seed();
    const res = await call(t, { url: '/v2/admin/clusters' });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body.clusters.map((c: { id: string }) => c.id)).toEqual(['cluster_c', 'cluster_b', 'cluster_a']);
    expect(body.clusters[1]).toMatchObject({
      account: { id: other.accountId, name: 'Customer', tier: 'enterprise' },
      status: 'pending',
      queuedAt: '2026-11-02T00:00:00.000Z',
      hostId: null,
    });
    expect(body.pagination).toEqual({ total: 3, limit: 100, offset: 0, hasMore: false });
    expect(body.summary).toEqual({
      byStatus: { running: 1, pending: 1, stopped: 1 },
      gpusHeld: 2,
      pendingGpus: 4,
    });
  });

  it('filters by status, account, GPU type and id, and pages', async () => {
    const other = await seed();
    const pending = (await call(t, { url: '/v2/admin/clusters?status=pending,deleted' })).json();
    expect(pending.clusters.map((c: { id: string }) => c.id)).toEqual(['cluster_d', 'cluster_b']);
    const theirs = (await call(t, { url: `/v2/admin/clusters?account_id=${other.accountId}` })).json();
    expect(theirs.pagination.total).toBe(2);
    const a100 = (await call(t, { url: '/v2/admin/clusters?gpu_type=A100' })).json();
    expect(a100.clusters.map((c: { id: string }) => c.id)).toEqual(['cluster_c']);
    const page = (await call(t, { url: '/v2/admin/clusters?limit=2&offset=1' })).json();
    expect(page.clusters.map((c: { id: string }) => c.id)).toEqual(['cluster_b', 'cluster_a']);
    expect(page.pagination).toEqual({ total: 3, limit: 2, offset: 1, hasMore: false });
    const first = (await call(t, { url: '/v2/admin/clusters?limit=1' })).json();
    expect(first.pagination.hasMore).toBe(true);
    // One cluster by id (the dashboard's link from a workload to its cluster).
    const one = (await call(t, { url: '/v2/admin/clusters?id=cluster_c' })).json();
    expect(one.clusters.map((c: { id: string }) => c.id)).toEqual(['cluster_c']);
  });

  it('refuses unknown statuses and bad paging with VALIDATION_ERROR', async () => {
    const unknown = await call(t, { url: '/v2/admin/clusters?status=running,bogus' });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'status' } });
    expect((await call(t, { url: '/v2/admin/clusters?limit=0' })).statusCode).toBe(400);
    expect((await call(t, { url: '/v2/admin/clusters?extra=1' })).statusCode).toBe(400);
  });

  it("is for operators only: another account's owner and a developer of the operators' account get 403", async () => {
    await seed();
    const customer = await addAccount(t, 'Stranger');
    const res = await call(t, { url: '/v2/admin/clusters', key: customer });
    expect(res.statusCode).toBe(403);
    expect(res.body).not.toContain('cluster_a');
    const developer = await addMember(t, { role: 'developer' });
    expect((await call(t, { url: '/v2/admin/clusters', key: developer })).statusCode).toBe(403);
    expect((await call(t, { url: '/v2/admin/clusters', key: 'anv_live_garbage' })).statusCode).toBe(401);
  });
});

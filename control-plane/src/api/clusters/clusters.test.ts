import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { addAccount, addMember, boostRateLimits, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { waitFor } from '../../testing/wait.ts';

/**
 * Cluster API over simulated hosts inserted into the database (no agent: clusters stay `starting`).
 * The real container lifecycle is in test/clusters/lifecycle.e2e.test.ts.
 */
describe('cluster API: placement, errors, bad input, isolation', () => {
  let t: TestApp;

  beforeAll(async () => {
    // The simulated hosts never send a heartbeat: a grace period no loaded machine outlasts keeps them ready.
    t = await createTestApp({ env: { ANVIL_HOST_GRACE_SECONDS: '3600' } });
    // 8 hosts x 2 H100 in us-east-1, 1 host x 1 A100 in eu-west-1.
    await insertSimulatedHosts(t.context.db, {
      prefix: 'h',
      count: 8,
      gpusPerHost: 2,
      region: 'us-east-1',
      cpuThreads: 16,
    });
    await insertSimulatedHosts(t.context.db, {
      prefix: 'a',
      count: 1,
      gpusPerHost: 1,
      region: 'eu-west-1',
      gpuName: 'NVIDIA A100-SXM4-80GB',
    });
    await t.context.clusters.prices.set({ H100: 2.5, A100: 1.2 });
    // POST /clusters is limited to 20 an hour per account (spec); this file creates more.
    await boostRateLimits(t);
  });

  afterAll(async () => {
    await t?.close();
  });

  const create = (payload: Record<string, unknown>, key?: string) =>
    call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { docker_image: 'busybox', gpu_type: 'H100', ...payload },
      ...(key ? { key } : {}),
    });

  it('20 parallel creates never share a GPU; what does not fit now is pending', async () => {
    const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => create({ name: `par-${i}` })));
    for (const r of responses) expect(r.statusCode, r.body).toBe(201);
    const ids = responses.map((r) => r.json().data.id as string);
    const rows = await t.context.db.prisma.cluster.findMany({ where: { id: { in: ids } } });
    const placed = rows.filter((r) => r.status === 'starting');
    expect(placed).toHaveLength(16);
    expect(rows.filter((r) => r.status === 'pending')).toHaveLength(4);
    const gpus = placed.flatMap((r) => r.gpuIndices.map((i) => `${r.hostId}#${i}`));
    expect(new Set(gpus).size).toBe(16);
    // Fixed at placement: price x count.
    expect(placed.every((r) => r.hourlyRate === 2.5)).toBe(true);
    const pending = responses.map((r) => r.json().data).find((c) => c.status === 'pending');
    expect(pending.status_reason).toMatch(/waiting for 1 x H100/);

    // Deleting a placed one frees its GPU: the oldest pending cluster takes it.
    const pendingIds = rows.filter((r) => r.status === 'pending').map((r) => r.id);
    const oldestAt = Math.min(
      ...rows.filter((r) => r.status === 'pending').map((r) => r.createdAt.getTime()),
    );
    const victim = placed[0]!;
    const del = await call(t, {
      method: 'DELETE',
      url: `/v1/clusters/${victim.id}`,
      payload: { confirm_deletion: 'DELETE', wait_for_completion: true },
    });
    expect(del.statusCode, del.body).toBe(200);
    expect(del.json().data.deletion_progress).toMatchObject({ phase: 'completed', percentage: 100 });
    const startedNow = async () =>
      t.context.db.prisma.cluster.findMany({ where: { id: { in: pendingIds }, status: 'starting' } });
    await waitFor('the pending cluster started', async () => (await startedNow()).length === 1);
    const [taker] = await startedNow();
    expect(taker!.createdAt.getTime()).toBe(oldestAt);
    expect(taker!.hostId).toBe(victim.hostId);
    expect(taker!.gpuIndices).toEqual(victim.gpuIndices);
    expect((await call(t, { url: `/v1/clusters/${victim.id}` })).statusCode).toBe(404);

    // Clean up so later tests see free capacity.
    await Promise.all(
      ids.map((id) =>
        call(t, {
          method: 'DELETE',
          url: `/v1/clusters/${id}`,
          payload: { confirm_deletion: 'DELETE', wait_for_completion: true },
        }),
      ),
    );
  });

  it('places by type and region, and answers INSUFFICIENT_RESOURCES when no host could ever fit', async () => {
    const a100 = await create({ name: 'a100', gpu_type: 'A100' });
    expect(a100.statusCode, a100.body).toBe(201);
    expect(a100.json().data).toMatchObject({
      status: 'starting',
      region: 'eu-west-1',
      cost: { hourly_rate: 1.2 },
    });

    const t4 = await create({ name: 't4', gpu_type: 'T4' });
    expect(t4.statusCode).toBe(422);
    expect(t4.json()).toMatchObject({
      success: false,
      error: {
        code: 'INSUFFICIENT_RESOURCES',
        details: { requestedGpuType: 'T4', availableGpuTypes: ['A100', 'H100'] },
      },
      meta: { request_id: expect.any(String) },
    });
    const tooMany = await create({ name: 'big', gpu_count: 3 });
    expect(tooMany.json().error.code).toBe('INSUFFICIENT_RESOURCES');
    const wrongRegion = await create({ name: 'west', region: 'us-west-2' });
    expect(wrongRegion.json().error.details).toMatchObject({
      requestedGpuType: 'H100',
      availableGpuTypes: [],
    });
    // Nothing is left behind by a refused create.
    expect(await t.context.db.prisma.cluster.count({ where: { name: { in: ['t4', 'big', 'west'] } } })).toBe(
      0,
    );
  });

  it('answers the error codes of the lifecycle routes', async () => {
    const created = (await create({ name: 'errors' })).json().data;
    // INVALID_STATE: stop needs running (this one is starting: no agent behind the simulated host).
    const stop = await call(t, { method: 'POST', url: `/v1/clusters/${created.id}/stop`, payload: {} });
    expect(stop.statusCode).toBe(400);
    expect(stop.json().error).toMatchObject({
      code: 'INVALID_STATE',
      details: { current_status: 'starting', required_status: 'running', suggestion: expect.any(String) },
    });
    // CONFIRMATION_REQUIRED.
    for (const payload of [{}, { confirm_deletion: 'delete' }]) {
      const del = await call(t, { method: 'DELETE', url: `/v1/clusters/${created.id}`, payload });
      expect(del.statusCode).toBe(400);
      expect(del.json().error).toMatchObject({
        code: 'CONFIRMATION_REQUIRED',
        details: {
          required_field: 'confirm_deletion',
          required_value: 'DELETE',
          cluster_id: created.id,
          cluster_name: 'errors',
          warning: expect.any(String),
        },
      });
    }
    // /v2 answers flat errors.
    const v2 = await call(t, { method: 'DELETE', url: `/v2/clusters/${created.id}`, payload: {} });
    expect(v2.json()).toMatchObject({ error: 'CONFIRMATION_REQUIRED', code: 400 });
    // CLUSTER_NOT_FOUND, TEMPLATE_NOT_FOUND, INVALID_PARAMETERS.
    expect((await call(t, { url: '/v1/clusters/cluster_nope' })).json().error.code).toBe('CLUSTER_NOT_FOUND');
    expect((await create({ name: 'tmpl', template_id: 'tmpl_nope' })).json().error.code).toBe(
      'TEMPLATE_NOT_FOUND',
    );
    expect((await call(t, { url: '/v1/clusters?limit=101' })).json().error.code).toBe('INVALID_PARAMETERS');
    // Start of a cluster being deleted: INVALID_STATE.
    await call(t, {
      method: 'DELETE',
      url: `/v1/clusters/${created.id}`,
      payload: { confirm_deletion: 'DELETE' },
    });
    const row = await t.context.db.prisma.cluster.findUnique({ where: { id: created.id } });
    if (row?.status === 'deleting') {
      const start = await call(t, { method: 'POST', url: `/v1/clusters/${created.id}/start` });
      expect(start.json().error.code).toBe('INVALID_STATE');
    }
  });

  it.each([
    [{}, 'name'],
    [{ name: '' }, 'name'],
    [{ name: 'x', gpu_type: 'B200' }, 'gpu_type'],
    [{ name: 'x', gpu_count: 0 }, 'gpu_count'],
    [{ name: 'x', gpu_count: 1.5 }, 'gpu_count'],
    [{ name: 'x', cpu_cores: 0 }, 'cpu_cores'],
    [{ name: 'x', memory_gb: 99999 }, 'memory_gb'],
    [{ name: 'x', storage_gb: -1 }, 'storage_gb'],
    [{ name: 'x', region: 'mars-1' }, 'region'],
    [{ name: 'x', ports: [{ internal_port: 70000 }] }, 'ports.0.internal_port'],
    [{ name: 'x', ports: [{ internal_port: 80, protocol: 'sctp' }] }, 'ports.0.protocol'],
    [{ name: 'x', env: { 'BAD-NAME': '1' } }, 'env.BAD-NAME'],
    [{ name: 'x', env: { A: 1 } }, 'env.A'],
    [{ name: 'x', expires_at: 'tomorrow' }, 'expires_at'],
    [{ name: 'x', expires_at: '2000-01-01T00:00:00Z' }, 'expires_at'],
    [{ name: 'x', ssh_enabled: 'yes' }, 'ssh_enabled'],
    [{ name: 'x', unknown: 1 }, 'unknown'],
    [{ name: 'x', docker_image: undefined }, 'docker_image'],
  ])('create refuses %j (field %s)', async (body, field) => {
    const payload = { docker_image: 'busybox', gpu_type: 'H100', ...body };
    if ('docker_image' in body && body.docker_image === undefined)
      delete (payload as Record<string, unknown>)['docker_image'];
    const r = await call(t, { method: 'POST', url: '/v1/clusters', payload });
    expect(r.statusCode, r.body).toBe(400);
    expect(r.json()).toMatchObject({
      success: false,
      error: { code: 'VALIDATION_ERROR', details: { field } },
    });
  });

  it.each([
    ['limit=0', ['limit']],
    ['limit=101', ['limit']],
    ['page=0', ['page']],
    ['page=abc&limit=x', ['page', 'limit']],
    ['status=sleeping', ['status']],
    ['gpu_type=B200', ['gpu_type']],
    ['region=moon', ['region']],
    ['sort_by=price', ['sort_by']],
    ['sort_order=up', ['sort_order']],
    ['min_gpu_count=-1', ['min_gpu_count']],
    ['min_gpu_count=4&max_gpu_count=2', ['min_gpu_count']],
    ['created_after=yesterday', ['created_after']],
    ['created_after=2026-02-01&created_before=2026-01-01', ['created_after']],
    ['include_metrics=maybe', ['include_metrics']],
    ['colour=red', ['colour']],
    ['limit=1&limit=2', ['limit']],
  ])('list refuses ?%s with details per parameter', async (query, params) => {
    const r = await call(t, { url: `/v1/clusters?${query}` });
    expect(r.statusCode, r.body).toBe(400);
    const body = r.json();
    expect(body.error.code).toBe('INVALID_PARAMETERS');
    expect(Object.keys(body.error.details).sort()).toEqual([...params].sort());
  });

  it('lists with filters, sorting and pagination; v2 answers the short form', async () => {
    const names = ['list-b', 'list-a', 'list-c'];
    for (const [i, name] of names.entries()) {
      const r = await create({
        name,
        description: i === 2 ? 'the special one' : undefined,
        project_id: 'proj_list',
      });
      expect(r.statusCode, r.body).toBe(201);
    }
    const list = await call(t, {
      url: '/v1/clusters?project_id=proj_list&sort_by=name&sort_order=asc&limit=2',
    });
    expect(list.statusCode, list.body).toBe(200);
    const body = list.json();
    expect(body.data.clusters.map((c: { name: string }) => c.name)).toEqual(['list-a', 'list-b']);
    expect(body.data.pagination).toEqual({
      current_page: 1,
      total_pages: 2,
      total_count: 3,
      per_page: 2,
      has_next: true,
      has_previous: false,
    });
    expect(body.data.filters_applied).toMatchObject({
      project_id: 'proj_list',
      sort_by: 'name',
      sort_order: 'asc',
    });
    expect(body.meta).toMatchObject({ request_id: expect.any(String), response_time_ms: expect.any(Number) });
    const page2 = (
      await call(t, { url: '/v1/clusters?project_id=proj_list&sort_by=name&sort_order=asc&limit=2&page=2' })
    ).json();
    expect(page2.data.clusters.map((c: { name: string }) => c.name)).toEqual(['list-c']);
    expect(page2.data.pagination).toMatchObject({ has_next: false, has_previous: true });
    const search = (await call(t, { url: '/v1/clusters?search=SPECIAL' })).json();
    expect(search.data.clusters.map((c: { name: string }) => c.name)).toEqual(['list-c']);
    const filtered = (
      await call(t, {
        url: '/v1/clusters?project_id=proj_list&status=starting&gpu_type=H100&min_gpu_count=1&max_gpu_count=1&sort_by=cost&created_after=2020-01-01',
      })
    ).json();
    expect(filtered.data.pagination.total_count).toBe(3);
    expect(
      (await call(t, { url: '/v1/clusters?project_id=proj_list&min_gpu_count=2' })).json().data.clusters,
    ).toEqual([]);

    const v2 = await call(t, { url: '/v2/clusters?project_id=proj_list&sort_by=name&sort_order=asc' });
    expect(v2.headers['x-total-count']).toBe('3');
    expect(v2.json()[0]).toEqual({
      id: expect.stringMatching(/^cluster_/),
      name: 'list-a',
      status: 'starting',
      gpuType: 'H100',
      containerDiskSize: 10,
      volumeSize: 10,
      createdAt: expect.any(String),
    });
  });

  it("keeps accounts apart (404 for another account's id) and enforces key scopes", async () => {
    const mine = (await create({ name: 'mine' })).json().data;
    const other = await addAccount(t);
    for (const [method, url] of [
      ['GET', `/v1/clusters/${mine.id}`],
      ['POST', `/v1/clusters/${mine.id}/start`],
      ['POST', `/v1/clusters/${mine.id}/stop`],
      ['DELETE', `/v1/clusters/${mine.id}`],
    ] as const) {
      const payload =
        method === 'DELETE' ? { confirm_deletion: 'DELETE' } : method === 'POST' ? {} : undefined;
      const r = await call(t, { method, url, key: other, ...(payload ? { payload } : {}) });
      expect(r.statusCode, `${method} ${url}`).toBe(404);
      expect(r.json().error.code).toBe('CLUSTER_NOT_FOUND');
    }
    expect((await call(t, { url: '/v1/clusters', key: other })).json().data.clusters).toEqual([]);

    const noScope = await addMember(t, { role: 'developer', keyScopes: ['endpoints'] });
    const denied = await call(t, { url: '/v1/clusters', key: noScope });
    expect(denied.statusCode).toBe(403);
    const readOnly = await addMember(t, { role: 'developer', keyPermissions: ['read'] });
    expect((await call(t, { url: `/v1/clusters/${mine.id}`, key: readOnly })).statusCode).toBe(200);
    expect(
      (
        await call(t, {
          method: 'POST',
          url: '/v1/clusters',
          key: readOnly,
          payload: { name: 'x', docker_image: 'b', gpu_type: 'H100' },
        })
      ).statusCode,
    ).toBe(403);
    const viewer = await addMember(t, { role: 'viewer' });
    const byViewer = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      key: viewer,
      payload: { name: 'x', docker_image: 'b', gpu_type: 'H100' },
    });
    expect(byViewer.json().error.code).toBe('INSUFFICIENT_PERMISSIONS');
  });

  it('lets operators read and set the GPU price table', async () => {
    const set = await call(t, {
      method: 'PUT',
      url: '/v2/admin/gpu-prices',
      payload: { prices: { T4: 0.35 } },
    });
    expect(set.statusCode, set.body).toBe(200);
    expect(set.json().prices).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ gpu_type: 'T4', hourly_rate: 0.35 }),
        expect.objectContaining({ gpu_type: 'H100', hourly_rate: 2.5 }),
      ]),
    );
    expect(
      (await call(t, { method: 'PUT', url: '/v2/admin/gpu-prices', payload: { prices: { B200: 1 } } }))
        .statusCode,
    ).toBe(400);
    const other = await addAccount(t);
    expect((await call(t, { url: '/v2/admin/gpu-prices', key: other })).statusCode).toBe(403);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { driftedHosts } from '../../scheduler/capacity.ts';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { addAccount, addMember, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { waitFor } from '../../testing/wait.ts';

/**
 * Endpoint API over simulated hosts inserted into the database (no agent behind them: workers stay
 * `starting`, so no job runs here). Workers with real containers and the execution of jobs are in
 * test/endpoints/.
 */
describe('serverless endpoint API: CRUD, bounds, placement, isolation', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await createTestApp({ env: { ANVIL_PUBLIC_URL: 'https://anvil.example.com' } });
    // Two A100 hosts for the placement test, eight H100 hosts for the rest (so none waits for GPUs).
    await insertSimulatedHosts(t.context.db, {
      prefix: 'a',
      count: 2,
      gpusPerHost: 2,
      gpuName: 'NVIDIA A100-SXM4-80GB',
    });
    await insertSimulatedHosts(t.context.db, { prefix: 'h', count: 8, gpusPerHost: 2 });
    await t.context.clusters.prices.set({ H100: 2 });
  });
  afterAll(async () => t?.close());

  const create = (payload: Record<string, unknown>, key?: string) =>
    call(t, {
      method: 'POST',
      url: '/v2/endpoints',
      payload: { name: 'llm', image: 'anvil-test/busybox:latest', gpuType: 'H100', ...payload },
      ...(key ? { key } : {}),
    });
  const workersOf = (endpointId: string) =>
    t.context.db.prisma.endpointWorker.findMany({ where: { endpointId }, orderBy: { createdAt: 'asc' } });

  it('creates an endpoint whose workers take GPUs through the shared capacity index', async () => {
    const r = await create({
      name: 'chat',
      gpuType: 'A100',
      configuration: { workerCount: 2, environmentVariables: { MODEL: 'x' } },
    });
    expect(r.statusCode, r.body).toBe(201);
    const ep = r.json();
    expect(ep).toMatchObject({
      id: expect.stringMatching(/^ep_[a-z0-9]+$/),
      name: 'chat',
      status: 'pending',
      url: `https://anvil.example.com/v2/${ep.id}/runsync`,
      gpuType: 'A100',
      gpuCount: 1,
      templateId: null,
      metrics: { totalExecutions: 0, averageLatency: null, lastExecution: null },
      configuration: {
        workerCount: 2,
        maxConcurrency: 1,
        timeoutSeconds: 600,
        environmentVariables: { MODEL: 'x' },
        autoScaling: { enabled: false, minWorkers: 0, maxWorkers: 2, targetUtilization: 70 },
      },
    });
    const workers = await waitFor('two workers placed', async () => {
      const list = await workersOf(ep.id);
      return list.length === 2 ? list : null;
    });
    // Spread over both hosts (anti-affinity), each holding one GPU in its workload spec.
    expect(new Set(workers.map((w) => w.hostId)).size).toBe(2);
    for (const w of workers) {
      const load = await t.context.db.prisma.workload.findUniqueOrThrow({ where: { id: w.id } });
      expect(load.kind).toBe('endpoint_worker');
      expect((load.spec as { gpus: { index: number }[] }).gpus.map((g) => g.index)).toEqual(w.gpuIndices);
      expect((load.spec as { env: Record<string, string> }).env).toMatchObject({
        MODEL: 'x',
        ANVIL_ENDPOINT_ID: ep.id,
      });
    }
    expect(await driftedHosts(t.context.db)).toEqual([]);
    const got = await call(t, { url: `/v2/endpoints/${ep.id}` });
    expect(got.statusCode).toBe(200);
    expect(got.json().workers).toEqual({ target: 2, ready: 0, starting: 2, draining: 0 });

    // A cluster asking for both GPUs of a host cannot get one a worker holds: it waits.
    const cluster = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name: 'big', docker_image: 'busybox', gpu_type: 'A100', gpu_count: 2 },
    });
    expect(cluster.statusCode, cluster.body).toBe(201);
    expect(cluster.json().data.status).toBe('pending');
    const small = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name: 'small', docker_image: 'busybox', gpu_type: 'A100', gpu_count: 1 },
    });
    const smallRow = await t.context.db.prisma.cluster.findUniqueOrThrow({
      where: { id: small.json().data.id },
    });
    const taken = workers.filter((w) => w.hostId === smallRow.hostId).flatMap((w) => w.gpuIndices);
    expect(smallRow.gpuIndices.some((i) => taken.includes(i))).toBe(false);
    for (const id of [cluster.json().data.id, small.json().data.id]) {
      await call(t, { method: 'DELETE', url: `/v1/clusters/${id}`, payload: { confirm_deletion: 'DELETE' } });
    }
  });

  it('lists with paging and filters; unknown and other accounts’ endpoints are 404 with details', async () => {
    await create({ name: 'list-b', configuration: { workerCount: 1 } });
    const a = (await create({ name: 'list-a', configuration: { workerCount: 1 } })).json();
    const page = await call(t, { url: '/v2/endpoints?limit=1&offset=0' });
    expect(page.statusCode).toBe(200);
    expect(page.json().endpoints).toHaveLength(1);
    expect(page.json().endpoints[0].id).toBe(a.id);
    expect(page.json().pagination).toMatchObject({ limit: 1, offset: 0, hasMore: true });
    const other = await addAccount(t);
    const foreign = await call(t, { url: `/v2/endpoints/${a.id}`, key: other.key });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json()).toMatchObject({
      error: 'ENDPOINT_NOT_FOUND',
      code: 404,
      details: { endpointId: a.id, suggestion: expect.any(String) },
    });
    expect((await call(t, { url: '/v2/endpoints', key: other.key })).json().endpoints).toEqual([]);
    for (const [method, url] of [
      ['PUT', `/v2/endpoints/${a.id}`],
      ['DELETE', `/v2/endpoints/${a.id}`],
      ['POST', `/v2/${a.id}/run`],
      ['GET', `/v2/${a.id}/health`],
      ['GET', `/v2/endpoints/${a.id}/health`],
    ] as const) {
      const payload = method === 'PUT' ? { workerCount: 2 } : method === 'POST' ? { input: {} } : undefined;
      const r = await call(t, { method, url, key: other.key, payload });
      expect(r.statusCode, `${method} ${url}`).toBe(404);
      expect(r.json().error).toBe('ENDPOINT_NOT_FOUND');
    }
    const missing = await call(t, { url: '/v2/endpoints/ep_doesnotexist' });
    expect(missing.statusCode).toBe(404);
  });

  it('refuses bad input with the spec’s errors and changes nothing', async () => {
    const ep = (await create({ name: 'bounds' })).json();
    const cases: [Record<string, unknown>, Record<string, unknown>][] = [
      [{ workerCount: 51 }, { field: 'workerCount', value: 51, maximum: 50 }],
      [{ workerCount: 0 }, { field: 'workerCount', value: 0, minimum: 1 }],
      [{ timeoutSeconds: 3601 }, { field: 'timeoutSeconds', value: 3601, maximum: 3600 }],
      [{ timeoutSeconds: 5 }, { field: 'timeoutSeconds', value: 5, minimum: 10 }],
      [
        { autoScaling: { targetUtilization: 95 } },
        { field: 'autoScaling.targetUtilization', value: 95, maximum: 90 },
      ],
      [
        { autoScaling: { minWorkers: 3, maxWorkers: 2 } },
        { field: 'autoScaling.minWorkers', value: 3, maximum: 2 },
      ],
      [{ environmentVariables: { ANVIL_X: '1' } }, { field: 'environmentVariables.ANVIL_X' }],
    ];
    for (const [payload, details] of cases) {
      const r = await call(t, { method: 'PUT', url: `/v2/endpoints/${ep.id}`, payload });
      expect(r.statusCode, JSON.stringify(payload)).toBe(400);
      expect(r.json()).toMatchObject({ error: 'INVALID_CONFIGURATION', code: 400, details });
    }
    const created = await create({ name: 'x', configuration: { workerCount: 99 } });
    expect(created.statusCode).toBe(400);
    expect(created.json().details).toMatchObject({ field: 'workerCount', maximum: 50 });
    expect((await create({ name: 'x', gpuType: 'B200' })).statusCode).toBe(400);
    expect((await create({ name: 'x', image: undefined })).json()).toMatchObject({
      error: 'VALIDATION_ERROR',
      details: { field: 'image' },
    });
    const impossible = await create({ name: 'x', gpuType: 'T4' });
    expect(impossible.statusCode).toBe(422);
    expect(impossible.json()).toMatchObject({
      error: 'INSUFFICIENT_RESOURCES',
      details: { requestedGpuType: 'T4', availableGpuTypes: ['A100', 'H100'] },
    });
    expect((await create({ name: 'x', gpuCount: 3 })).statusCode).toBe(422);
    const unchanged = (await call(t, { url: `/v2/endpoints/${ep.id}` })).json();
    expect(unchanged.configuration).toEqual(ep.configuration);
    expect(unchanged.status).not.toBe('updating');
    const wrongRun = await call(t, {
      method: 'POST',
      url: `/v2/${ep.id}/run`,
      payload: { input: 1, policy: { ttl: 5 } },
    });
    expect(wrongRun.statusCode).toBe(400);
    const privateHook = await call(t, {
      method: 'POST',
      url: `/v2/${ep.id}/run`,
      payload: { input: 1, webhook: 'http://127.0.0.1:9/x' },
    });
    expect(privateHook.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'webhook' } });
    expect(await t.context.db.prisma.endpointJob.count({ where: { endpointId: ep.id } })).toBe(0);
  });

  it('updates gradually (status updating, new workers for a new environment) and refuses while requests run', async () => {
    const ep = (await create({ name: 'upd', configuration: { workerCount: 1 } })).json();
    const first = await waitFor('worker placed', async () => (await workersOf(ep.id))[0]);
    const r = await call(t, {
      method: 'PUT',
      url: `/v2/endpoints/${ep.id}`,
      payload: {
        timeoutSeconds: 120,
        environmentVariables: { A: 'b' },
        autoScaling: { scaleDownCooldown: 5 },
      },
    });
    expect(r.statusCode, r.body).toBe(200);
    expect(r.json()).toMatchObject({
      id: ep.id,
      name: 'upd',
      status: 'updating',
      configuration: {
        timeoutSeconds: 120,
        environmentVariables: { A: 'b' },
        autoScaling: { scaleDownCooldown: 5 },
      },
      updatedAt: expect.any(String),
    });
    // The new environment needs a new worker: it starts beside the old one (which stays until it is ready).
    const replacement = await waitFor('replacement worker', async () => {
      const list = await workersOf(ep.id);
      return list.find((w) => w.configVersion === 2 && w.status === 'starting') ?? null;
    });
    expect(replacement.id).not.toBe(first.id);
    expect(
      (await t.context.db.prisma.endpointWorker.findUniqueOrThrow({ where: { id: first.id } })).status,
    ).toBe('starting');
    expect((await call(t, { url: `/v2/endpoints/${ep.id}` })).json().status).toBe('updating');

    await t.context.db.prisma.endpointJob.create({
      data: {
        id: 'job-running-1',
        endpointId: ep.id,
        accountId: t.accountId,
        status: 'IN_PROGRESS',
        executionTimeoutMs: 60_000,
        ttlMs: 86_400_000n,
        expiresAt: new Date(Date.now() + 86_400_000),
        leaseUntil: new Date(Date.now() + 60_000),
      },
    });
    // Scaling applies at once while a request runs: the target moves now, no worker is replaced for it.
    const scaled = await call(t, {
      method: 'PUT',
      url: `/v2/endpoints/${ep.id}`,
      payload: { workerCount: 3, autoScaling: { scaleDownCooldown: 7 } },
    });
    expect(scaled.statusCode, scaled.body).toBe(200);
    const row = await t.context.db.prisma.endpoint.findUniqueOrThrow({ where: { id: ep.id } });
    expect(row).toMatchObject({ targetWorkers: 3, configVersion: 2 });
    expect((await call(t, { url: `/v2/endpoints/${ep.id}` })).json().configuration).toMatchObject({
      workerCount: 3,
      autoScaling: { scaleDownCooldown: 7 },
    });
    // A change that reaches the containers (rolls the workers) waits for the running request.
    const busy = await call(t, {
      method: 'PUT',
      url: `/v2/endpoints/${ep.id}`,
      payload: { environmentVariables: { A: 'c' } },
    });
    expect(busy.statusCode).toBe(409);
    expect(busy.json()).toMatchObject({
      error: 'ENDPOINT_BUSY',
      details: {
        activeRequests: 1,
        rollingFields: ['environmentVariables', 'maxConcurrency', 'workerProtocol'],
      },
    });
    const after = (await call(t, { url: `/v2/endpoints/${ep.id}` })).json().configuration;
    expect(after.environmentVariables).toEqual({ A: 'b' });
  });

  it('queues, reads, cancels, retries and purges jobs; a viewer may read but not run', async () => {
    const ep = (await create({ name: 'exec', configuration: { workerCount: 1 } })).json();
    await waitFor('worker placed', async () => (await workersOf(ep.id))[0]);
    const run = await call(t, {
      method: 'POST',
      url: `/v2/${ep.id}/run`,
      payload: { input: { prompt: 'hi' }, policy: { ttl: 60_000 } },
    });
    expect(run.statusCode, run.body).toBe(200);
    expect(run.json()).toEqual({ id: expect.any(String), status: 'IN_QUEUE' });
    expect(Number(run.headers['x-ratelimit-limit'])).toBeGreaterThan(0);
    const jobId = run.json().id;
    const status = await call(t, { url: `/v2/${ep.id}/status/${jobId}` });
    expect(status.json()).toMatchObject({
      id: jobId,
      status: 'IN_QUEUE',
      output: null,
      executionTime: null,
      retries: 0,
      attempts: 0,
    });
    const sync = await call(t, { method: 'POST', url: `/v2/${ep.id}/runsync?wait=0`, payload: { input: 2 } });
    expect(sync.json()).toMatchObject({ status: 'IN_QUEUE' });
    const queue = await call(t, { url: `/v2/${ep.id}/health` });
    expect(queue.json().jobs).toMatchObject({ inQueue: 2, inProgress: 0 });
    expect(queue.json().workers).toMatchObject({ initializing: 1, ready: 0 });

    const viewer = await addMember(t, { role: 'viewer' });
    expect((await call(t, { url: `/v2/${ep.id}/status/${jobId}`, key: viewer })).statusCode).toBe(200);
    const denied = await call(t, {
      method: 'POST',
      url: `/v2/${ep.id}/run`,
      key: viewer,
      payload: { input: 1 },
    });
    expect(denied.statusCode).toBe(403);
    expect(denied.json().error).toBe('INSUFFICIENT_PERMISSIONS');
    // The batch health check only reads: a read-only key may POST it, and still may not run a job.
    const reader = await addMember(t, { role: 'viewer', keyPermissions: ['read'] });
    const batch = await call(t, {
      method: 'POST',
      url: '/v2/endpoints/health/batch',
      key: reader,
      payload: { endpointIds: [ep.id] },
    });
    expect(batch.statusCode, batch.body).toBe(200);
    expect(batch.json().reports).toHaveLength(1);
    const readerRun = await call(t, {
      method: 'POST',
      url: `/v2/${ep.id}/run`,
      key: reader,
      payload: { input: 1 },
    });
    expect(readerRun.statusCode).toBe(403);
    expect(readerRun.json()).toMatchObject({ error: 'FORBIDDEN', required_permission: 'endpoints:write' });

    const retryQueued = await call(t, { method: 'POST', url: `/v2/${ep.id}/retry/${jobId}` });
    expect(retryQueued.statusCode).toBe(409);
    expect(retryQueued.json()).toMatchObject({ error: 'JOB_NOT_RETRYABLE', details: { status: 'IN_QUEUE' } });
    const cancelled = await call(t, { method: 'POST', url: `/v2/${ep.id}/cancel/${jobId}` });
    expect(cancelled.json()).toEqual({ id: jobId, status: 'CANCELLED' });
    const again = await call(t, { method: 'POST', url: `/v2/${ep.id}/cancel/${jobId}` });
    expect(again.json().status).toBe('CANCELLED');
    const purged = await call(t, { method: 'POST', url: `/v2/${ep.id}/purge-queue` });
    expect(purged.json()).toEqual({ removed: 1, status: 'completed' });
    const other = (await create({ name: 'exec-2' })).json();
    const wrongEndpoint = await call(t, { url: `/v2/${other.id}/status/${jobId}` });
    expect(wrongEndpoint.statusCode).toBe(404);
    expect(wrongEndpoint.json().error).toBe('JOB_NOT_FOUND');
    const stream = await call(t, { url: `/v2/${ep.id}/stream/${jobId}?wait=0` });
    expect(stream.json()).toMatchObject({ id: jobId, status: 'CANCELLED', stream: [] });
  });

  it('deletes: jobs cancelled, workers’ containers removed and GPUs freed, then 404', async () => {
    const ep = (await create({ name: 'del', configuration: { workerCount: 1 } })).json();
    const worker = await waitFor('worker placed', async () => (await workersOf(ep.id))[0]);
    const job = (await call(t, { method: 'POST', url: `/v2/${ep.id}/run`, payload: { input: 1 } })).json();
    const r = await call(t, { method: 'DELETE', url: `/v2/endpoints/${ep.id}` });
    expect(r.statusCode, r.body).toBe(200);
    expect(r.json()).toMatchObject({ id: ep.id, deleted: true, cancelledJobs: 1, workersStopping: 1 });
    expect((await call(t, { url: `/v2/endpoints/${ep.id}` })).statusCode).toBe(404);
    expect((await t.context.db.prisma.endpointJob.findUniqueOrThrow({ where: { id: job.id } })).status).toBe(
      'CANCELLED',
    );
    await waitFor('worker removed', async () => {
      const load = await t.context.db.prisma.workload.findUniqueOrThrow({ where: { id: worker.id } });
      const row = await t.context.db.prisma.endpointWorker.findUniqueOrThrow({ where: { id: worker.id } });
      return load.desired === 'deleted' && row.status === 'stopped';
    });
    expect(await driftedHosts(t.context.db)).toEqual([]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';
import { type HttpReceiver, startHttpReceiver } from '../../control-plane/src/testing/receivers.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { BUSYBOX_IMAGE, type EndpointFleet, startEndpointFleet, waitFor, workerCommand } from './harness.ts';

// biome-ignore lint/suspicious/noExplicitAny: the API's JSON answers are read field by field in these tests.
type Body = any;

/**
 * Serverless endpoints end to end: the real control plane over HTTP on loopback, a real agent (simulated
 * 2xH100) running busybox worker containers that speak the worker contract (fixtures/worker.sh), jobs
 * dispatched through the agent's reverse tunnels.
 */
describe.skipIf(!dockerOrFail('test/endpoints/execution.e2e.test.ts'))(
  'serverless endpoints with a real agent and worker containers',
  () => {
    let f: EndpointFleet;
    let hooks: HttpReceiver;
    let endpointId: string;

    const api = async (method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown, key?: string) => {
      const answer = await f.cp.call<Body>(method, path, {
        ...(body === undefined ? {} : { body }),
        ...(key ? { key } : {}),
      });
      return answer;
    };
    const put = async (path: string, body: unknown) => {
      const response = await fetch(`${f.cp.url}${path}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${f.cp.ownerKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as Body };
    };
    const endpoint = async (id = endpointId) => (await api('GET', `/v2/endpoints/${id}`)).body;
    const job = async (jobId: string, id = endpointId) =>
      (await api('GET', `/v2/${id}/status/${jobId}`)).body;
    const waitJob = (jobId: string, statuses: string[], timeoutMs = 120_000, id = endpointId) =>
      waitFor(
        `job ${jobId} ${statuses.join('|')}`,
        async () => {
          const j = await job(jobId, id);
          return statuses.includes(j.status) ? j : null;
        },
        timeoutMs,
      );
    const run = async (input: unknown, extra: Record<string, unknown> = {}, id = endpointId) => {
      const r = await api('POST', `/v2/${id}/run`, { input, ...extra });
      expect(r.status, r.text).toBe(200);
      return r.body.id as string;
    };
    const containersOf = async (id: string) =>
      f.docker.listContainers({ all: true, filters: { label: [`anvil.endpoint=${id}`] } });

    beforeAll(async () => {
      f = await startEndpointFleet();
      hooks = await startHttpReceiver();
      await f.cp.context.clusters.prices.set({ H100: 3.6 });
      await api('POST', '/v2/auth/temporary-boost', { multiplier: 10, duration: '1h', reason: 'tests' });
      const created = await api('POST', '/v2/endpoints', {
        name: 'echo',
        image: BUSYBOX_IMAGE,
        command: await workerCommand(),
        gpuType: 'H100',
        configuration: { workerCount: 1, maxConcurrency: 2, timeoutSeconds: 60 },
      });
      expect(created.status, created.text).toBe(201);
      endpointId = created.body.id;
      await waitFor('endpoint active', async () => (await endpoint()).status === 'active', 180_000);
    }, 400_000);

    afterAll(async () => {
      await hooks?.close();
      await f?.close();
    });

    it('runsync answers the worker output; metrics, usage and the webhook follow from the job', {
      timeout: 180_000,
    }, async () => {
      const sync = await api('POST', `/v2/${endpointId}/runsync?wait=60000`, { input: { prompt: 'hello' } });
      expect(sync.status, sync.text).toBe(200);
      expect(sync.body).toMatchObject({
        status: 'COMPLETED',
        output: {
          echo: { prompt: 'hello' },
          worker: expect.stringMatching(/^wl_/),
          gpus: expect.stringMatching(/^GPU-/),
        },
        error: null,
        delayTime: expect.any(Number),
        executionTime: expect.any(Number),
      });
      const workers = await f.cp.context.db.prisma.endpointWorker.findMany({
        where: { endpointId, status: 'ready' },
      });
      expect(workers.map((w) => w.id)).toContain(sync.body.output.worker);
      // The worker's uptime is billed from its container start, as the agent reports it.
      for (const w of workers) expect(w.billingStartedAt).not.toBeNull();

      const asyncId = await run({ n: 1 }, { webhook: `${hooks.url}/done` });
      expect((await waitJob(asyncId, ['COMPLETED'])).output.echo).toEqual({ n: 1 });
      const delivery = await waitFor('webhook delivered', () =>
        hooks.requests.find((r) => r.url === '/done'),
      );
      expect(JSON.parse(delivery.body)).toMatchObject({ id: asyncId, status: 'COMPLETED', endpointId });

      const ep = await endpoint();
      expect(ep.metrics.totalExecutions).toBeGreaterThanOrEqual(2);
      expect(ep.metrics.averageLatency).toBeGreaterThanOrEqual(0);
      expect(ep.metrics.lastExecution).not.toBeNull();
      const usage = await f.cp.context.db.prisma.usageRecord.findMany({
        where: { resourceId: endpointId, kind: 'execution' },
      });
      expect(usage.length).toBeGreaterThanOrEqual(2);
      expect(usage[0]).toMatchObject({ resourceType: 'endpoint', gpuType: 'H100', quantity: 1, cost: 0 });
      const endpointsUsage = await api('GET', '/v2/accounts/usage/endpoints?period=1d');
      expect(endpointsUsage.body.endpointUsage[0]).toMatchObject({
        endpointId,
        executions: expect.any(Number),
      });
      expect(endpointsUsage.body.endpointUsage[0].computeHours).toBeGreaterThan(0);
    });

    it('fails, retries, times out, cancels and streams', { timeout: 240_000 }, async () => {
      const failed = await run({ op: 'fail' });
      expect(await waitJob(failed, ['FAILED'])).toMatchObject({ status: 'FAILED', error: 'boom' });
      const retried = await api('POST', `/v2/${endpointId}/retry/${failed}`);
      expect(retried.body).toEqual({ id: failed, status: 'IN_QUEUE' });
      expect(await waitJob(failed, ['FAILED'])).toMatchObject({ retries: 1, error: 'boom' });

      const slow = await run({ op: 'sleep', seconds: 30 }, { policy: { executionTimeout: 5_000 } });
      const timedOut = await waitJob(slow, ['TIMED_OUT'], 60_000);
      expect(timedOut.error).toMatch(/execution timeout of 5000 ms/);
      expect(timedOut.executionTime).toBeGreaterThanOrEqual(5_000);

      const long = await run({ op: 'sleep', seconds: 30 });
      await waitJob(long, ['IN_PROGRESS']);
      const cancelled = await api('POST', `/v2/${endpointId}/cancel/${long}`);
      expect(cancelled.body).toEqual({ id: long, status: 'CANCELLED' });
      // The slot is free again at once: a quick job runs while the cancelled sleeper would still sleep.
      const quick = await api('POST', `/v2/${endpointId}/runsync?wait=20000`, { input: 'quick' });
      expect(quick.body.status).toBe('COMPLETED');
      expect((await job(long)).status).toBe('CANCELLED');

      const streamed = await run({ op: 'stream' });
      const first = await api('GET', `/v2/${endpointId}/stream/${streamed}?wait=20000`);
      expect(first.body.stream[0]).toEqual({ output: 'part-1', seq: 1 });
      const final = await waitJob(streamed, ['COMPLETED']);
      expect(final.output).toEqual(['part-1', 'part-2', 'part-3']);
      const rest = await api('GET', `/v2/${endpointId}/stream/${streamed}`);
      const seen = [...first.body.stream, ...rest.body.stream].map((c: Body) => c.output);
      expect(seen).toEqual(['part-1', 'part-2', 'part-3']);
      const replay = await api('GET', `/v2/${endpointId}/stream/${streamed}?offset=1`);
      expect(replay.body.stream.map((c: Body) => c.seq)).toEqual([2, 3]);
    });

    it('queues beyond the free slots, purges the queue, and reports health from real state', {
      timeout: 180_000,
    }, async () => {
      const busy = [await run({ op: 'sleep', seconds: 4 }), await run({ op: 'sleep', seconds: 4 })];
      const queued = [await run({ n: 'q1' }), await run({ n: 'q2' }), await run({ n: 'q3' })];
      await waitFor(
        'both slots busy',
        async () => (await api('GET', `/v2/${endpointId}/health`)).body.jobs.inProgress === 2,
      );
      const queue = (await api('GET', `/v2/${endpointId}/health`)).body;
      expect(queue.jobs.inQueue).toBe(3);
      expect(queue.workers).toMatchObject({ ready: 1, running: 1, idle: 0 });
      const purged = await api('POST', `/v2/${endpointId}/purge-queue`);
      expect(purged.body).toEqual({ removed: 3, status: 'completed' });
      for (const id of queued) expect((await job(id)).status).toBe('CANCELLED');
      for (const id of busy) expect((await waitJob(id, ['COMPLETED'])).output.slept).toBe(4);

      const report = await api(
        'GET',
        `/v2/endpoints/${endpointId}/health?check=deep&include=resources,dependencies`,
      );
      expect(report.status, report.text).toBe(200);
      // Degraded: more than 10% of the jobs of the last hour failed or timed out (the test above made them).
      expect(report.body).toMatchObject({
        endpointId,
        status: 'degraded',
        readiness: 'ready',
        version: 'config-1',
        checks: {
          api: { status: 'healthy', responseTime: expect.any(Number), lastError: null, checkedNow: true },
          model: { status: 'healthy', loadTime: expect.any(Number), lastInference: expect.any(String) },
          dependencies: {
            status: 'healthy',
            services: [{ name: 'database', status: 'healthy' }, { name: `host:${f.hostId}` }],
          },
        },
        metrics: { requestsLastHour: expect.any(Number), averageLatency: expect.any(Number) },
        startupProgress: null,
      });
      expect(report.body.metrics.errorRate).toBeGreaterThan(10);
      expect(report.body.issues).toEqual(
        expect.arrayContaining([expect.objectContaining({ type: 'error_rate', component: 'model' })]),
      );
      expect(report.body.resources.gpu).toMatchObject({ status: expect.any(String), warnings: [] });
      expect(report.body.uptime).toMatch(/s$/);
      expect((await api('GET', `/v2/endpoints/${endpointId}/health?timeout=31`)).status).toBe(400);
      const ready = await api('GET', `/v2/endpoints/${endpointId}/ready`);
      expect(ready.status).toBe(200);
      expect(ready.body).toMatchObject({
        ready: true,
        readinessGates: { model: true, dependencies: true, networking: true },
      });
      const live = await api('GET', `/v2/endpoints/${endpointId}/live`);
      expect(live.body).toMatchObject({ alive: true, version: 'config-1' });
      const batch = await api('POST', '/v2/endpoints/health/batch', {
        endpointIds: [endpointId, 'ep_unknown'],
      });
      expect(batch.body.reports[0].endpointId).toBe(endpointId);
      expect(batch.body.errors).toEqual([
        expect.objectContaining({ endpointId: 'ep_unknown', error: 'ENDPOINT_NOT_FOUND' }),
      ]);
    });

    it('another account sees none of it', { timeout: 60_000 }, async () => {
      // addAccount needs only the context of an app (the fleet's control plane is one).
      const other = await addAccount({ context: f.cp.context } as TestApp);
      const id = await run({ n: 'mine' });
      for (const [method, path] of [
        ['GET', `/v2/${endpointId}/status/${id}`],
        ['POST', `/v2/${endpointId}/cancel/${id}`],
        ['POST', `/v2/${endpointId}/run`],
        ['GET', `/v2/endpoints/${endpointId}`],
      ] as const) {
        const r = await api(method, path, method === 'POST' ? { input: 1 } : undefined, other.key);
        expect(r.status, `${method} ${path}`).toBe(404);
        expect(r.body.error).toBe('ENDPOINT_NOT_FOUND');
      }
      await waitJob(id, ['COMPLETED']);
    });

    it('a control-plane restart loses no queued or running job', { timeout: 240_000 }, async () => {
      const running = [await run({ op: 'sleep', seconds: 3 }), await run({ op: 'sleep', seconds: 3 })];
      await waitFor(
        'both running',
        async () => (await api('GET', `/v2/${endpointId}/health`)).body.jobs.inProgress === 2,
      );
      const queued = [await run({ n: 'r1' }), await run({ n: 'r2' })];
      await f.cp.restart(500);
      // Jobs running on the stopped process went back to the queue; every job finishes after the restart.
      for (const id of [...running, ...queued])
        expect((await waitJob(id, ['COMPLETED'], 120_000)).status).toBe('COMPLETED');
      expect((await job(running[0]!)).output.slept).toBe(3);
    });

    it('autoscales up under a queue and back down to zero when idle', { timeout: 300_000 }, async () => {
      const updated = await put(`/v2/endpoints/${endpointId}`, {
        maxConcurrency: 1,
        autoScaling: {
          enabled: true,
          minWorkers: 0,
          maxWorkers: 2,
          targetUtilization: 90,
          scaleUpCooldown: 0,
          scaleDownCooldown: 3,
        },
      });
      expect(updated.status, JSON.stringify(updated.body)).toBe(200);
      expect(updated.body.status).toBe('updating');
      // Idle: the target drops to 0 after the cooldown, and the old workers are drained.
      await waitFor(
        'scaled to zero',
        async () => {
          const ep = await endpoint();
          return (
            ep.status === 'inactive' &&
            ep.workers.target === 0 &&
            (await containersOf(endpointId)).length === 0
          );
        },
        120_000,
      );
      const jobs = [];
      for (let i = 0; i < 4; i += 1) jobs.push(await run({ op: 'sleep', seconds: 4 }));
      await waitFor(
        'scaled up to 2 ready workers',
        async () => {
          const ep = await endpoint();
          return ep.workers.target === 2 && ep.workers.ready === 2;
        },
        180_000,
      );
      const done = await Promise.all(jobs.map((id) => waitJob(id, ['COMPLETED'], 180_000)));
      expect(new Set(done.map((j) => j.output.worker)).size).toBe(2);
      await waitFor(
        'back to zero',
        async () => {
          const ep = await endpoint();
          return (
            ep.workers.target === 0 &&
            ep.status === 'inactive' &&
            (await containersOf(endpointId)).length === 0
          );
        },
        120_000,
      );
    });

    it('replaces a worker whose host went away, leaving no container behind', {
      timeout: 300_000,
    }, async () => {
      const r = await put(`/v2/endpoints/${endpointId}`, { autoScaling: { enabled: false }, workerCount: 1 });
      expect(r.status).toBe(200);
      const first = await waitFor(
        'one ready worker',
        async () => {
          const list = await f.cp.context.db.prisma.endpointWorker.findMany({
            where: { endpointId, status: 'ready' },
          });
          return list.length === 1 ? list[0] : null;
        },
        180_000,
      );
      await f.stopAgent();
      await waitFor(
        'worker lost',
        async () => {
          const w = await f.cp.context.db.prisma.endpointWorker.findUniqueOrThrow({
            where: { id: first.id },
          });
          return w.status === 'lost';
        },
        120_000,
      );
      const queued = await run({ n: 'after-loss' });
      await f.startAgentAgain();
      expect((await waitJob(queued, ['COMPLETED'], 180_000)).output.worker).not.toBe(first.id);
      // The lost worker's container was removed when its agent came back: only the replacement runs.
      await waitFor(
        'old container gone',
        async () => {
          const list = await containersOf(endpointId);
          return list.length === 1 && list[0]!.Labels['anvil.workload'] !== first.id;
        },
        120_000,
      );
    });

    it('deleting the endpoint removes its containers and frees its GPUs', { timeout: 180_000 }, async () => {
      const pending = await run({ op: 'sleep', seconds: 30 });
      const deleted = await api('DELETE', `/v2/endpoints/${endpointId}`);
      expect(deleted.status, deleted.text).toBe(200);
      expect((await api('GET', `/v2/endpoints/${endpointId}`)).status).toBe(404);
      const row = await f.cp.context.db.prisma.endpointJob.findUniqueOrThrow({ where: { id: pending } });
      expect(row.status).toBe('CANCELLED');
      await waitFor('no containers left', async () => (await containersOf(endpointId)).length === 0, 120_000);
      const capacity = await f.cp.context.db.prisma.hostCapacity.findMany({ where: { hostId: f.hostId } });
      await waitFor(
        'GPUs free',
        async () => {
          const rows = await f.cp.context.db.prisma.hostCapacity.findMany({ where: { hostId: f.hostId } });
          return rows.every((c) => c.freeIndices.length === c.gpuIndices.length);
        },
        30_000,
      );
      expect(capacity.length).toBeGreaterThan(0);
    });

    it('an endpoint whose workers keep failing turns error and sends endpoint.failed', {
      timeout: 300_000,
    }, async () => {
      const hook = await put('/v2/accounts/settings/notifications', {
        webhook: {
          enabled: true,
          url: `${hooks.url}/account`,
          secret: 'ep-failed-secret',
          events: ['endpoint.failed'],
        },
      });
      expect(hook.status, JSON.stringify(hook.body)).toBe(200);
      const created = await api('POST', '/v2/endpoints', {
        name: 'broken',
        image: BUSYBOX_IMAGE,
        command: ['sh', '-c', 'exit 3'],
        gpuType: 'H100',
        configuration: { workerCount: 1 },
      });
      expect(created.status, created.text).toBe(201);
      const broken = created.body.id as string;
      const failed = await waitFor(
        'endpoint error',
        async () => {
          const e = await endpoint(broken);
          return e.status === 'error' ? e : null;
        },
        240_000,
      );
      expect(failed.statusReason).toContain('exited with code 3');
      const event = await waitFor(
        'endpoint.failed delivered',
        async () => {
          await f.cp.context.accounts.outbox.drain();
          return hooks.requests.find((r) => r.headers['x-anvil-event'] === 'endpoint.failed') ?? null;
        },
        60_000,
      );
      const body = JSON.parse(event.body);
      expect(body).toMatchObject({
        type: 'endpoint.failed',
        data: { endpoint_id: broken, name: 'broken', status: 'error', failed_workers: 3 },
      });
      expect(body.data.reason).toContain('exited with code 3');
      expect(hooks.requests.filter((r) => r.headers['x-anvil-event'] === 'endpoint.failed')).toHaveLength(1);
      expect((await api('DELETE', `/v2/endpoints/${broken}`)).status).toBe(200);
    });
  },
);

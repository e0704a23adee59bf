import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { addAccount, addMember, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { createEndpoint, placedWorker } from '../../testing/endpoints.ts';
import { waitFor } from '../../testing/wait.ts';

/**
 * GET /v2/<endpoint_id>/status-sync/<job_id>: RunPod's long-poll status; RunPod's /run fields without an
 * effect here are refused by name. Workers on simulated hosts stay
 * `starting` (no agent), so the test moves a job to its worker and finishes it through the job queue and
 * the dispatcher's notice, as the dispatcher does when a worker answers.
 */
describe('serverless execution: RunPod compatibility (status-sync, refused RunPod fields)', () => {
  let t: TestApp;
  let endpointId: string;
  let workerId: string;

  beforeAll(async () => {
    t = await createTestApp();
    await insertSimulatedHosts(t.context.db, { prefix: 's', count: 1, gpusPerHost: 2 });
    endpointId = await createEndpoint(t, 'sync');
    workerId = (await placedWorker(t, endpointId)).id;
  });
  afterAll(async () => t?.close());

  const run = async () => {
    const r = await call(t, { method: 'POST', url: `/v2/${endpointId}/run`, payload: { input: { n: 1 } } });
    expect(r.statusCode, r.body).toBe(200);
    return r.json().id as string;
  };
  /** The job taken by the endpoint's worker, as a claim leaves it. */
  const start = (jobId: string) =>
    t.context.db.prisma.endpointJob.update({
      where: { id: jobId },
      data: { status: 'IN_PROGRESS', workerId, startedAt: new Date(), attempts: 1 },
    });

  it('answers a job completed during the wait with its output, before the wait ends', async () => {
    const jobId = await run();
    await start(jobId);
    const subscribed = vi.spyOn(t.context.endpoints.dispatcher, 'onFinished');
    try {
      // The longest wait allowed: if the poll missed the completion, this test would time out.
      const pending = call(t, { url: `/v2/${endpointId}/status-sync/${jobId}?wait=300000` });
      await waitFor('status-sync waiting', () => subscribed.mock.calls.length > 0);
      const finished = await t.context.endpoints.jobs.finish(jobId, workerId, {
        status: 'COMPLETED',
        output: { answer: 42 },
      });
      expect(finished?.status).toBe('COMPLETED');
      t.context.endpoints.dispatcher.notifyFinished(jobId);
      const answer = await pending;
      expect(answer.statusCode, answer.body).toBe(200);
      expect(answer.json()).toMatchObject({
        id: jobId,
        status: 'COMPLETED',
        output: { answer: 42 },
        workerId,
        executionTime: expect.any(Number),
        delayTime: expect.any(Number),
      });
    } finally {
      subscribed.mockRestore();
    }
    // Already final: answered at once, as /status answers it.
    const again = await call(t, { url: `/v2/${endpointId}/status-sync/${jobId}?wait=300000` });
    const status = await call(t, { url: `/v2/${endpointId}/status/${jobId}` });
    expect(again.json()).toEqual(status.json());
  }, 60_000);

  it('answers an unfinished job with its current status when the wait ends', async () => {
    const queued = await run();
    const q = await call(t, { url: `/v2/${endpointId}/status-sync/${queued}?wait=100` });
    expect(q.statusCode, q.body).toBe(200);
    expect(q.json()).toMatchObject({ id: queued, status: 'IN_QUEUE', output: null, executionTime: null });
    await start(queued);
    const p = await call(t, { url: `/v2/${endpointId}/status-sync/${queued}?wait=0` });
    expect(p.json()).toMatchObject({ id: queued, status: 'IN_PROGRESS', workerId });
    // A read-only member may wait on it, as on /status.
    const viewer = await addMember(t, { role: 'viewer', keyPermissions: ['read'] });
    const v = await call(t, { url: `/v2/${endpointId}/status-sync/${queued}?wait=0`, key: viewer });
    expect(v.statusCode, v.body).toBe(200);
  });

  it('refuses a bad wait with 400, and unknown or other accounts’ jobs with 404', async () => {
    const jobId = await run();
    for (const wait of ['-1', '300001', 'soon', '1.5']) {
      const bad = await call(t, { url: `/v2/${endpointId}/status-sync/${jobId}?wait=${wait}` });
      expect(bad.statusCode, `wait=${wait}: ${bad.body}`).toBe(400);
      expect(bad.json().error).toBe('VALIDATION_ERROR');
    }
    const unknown = await call(t, {
      url: `/v2/${endpointId}/status-sync/00000000-0000-4000-8000-000000000000?wait=0`,
    });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ error: 'JOB_NOT_FOUND' });
    const other = await addAccount(t);
    const foreign = await call(t, { url: `/v2/${endpointId}/status-sync/${jobId}?wait=0`, key: other });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json().error).toBe('ENDPOINT_NOT_FOUND');
    // Nothing changed: the job is still queued.
    expect((await call(t, { url: `/v2/${endpointId}/status/${jobId}` })).json().status).toBe('IN_QUEUE');
  });

  it('refuses policy.lowPriority=true, s3Config and /status?ttl= with 400 NOT_SUPPORTED naming them, changing nothing', async () => {
    const before = await t.context.db.prisma.endpointJob.count({ where: { endpointId } });
    for (const [route, extra, field] of [
      ['run', { policy: { lowPriority: true } }, 'policy.lowPriority'],
      ['runsync?wait=0', { policy: { lowPriority: true, ttl: 60_000 } }, 'policy.lowPriority'],
      ['run', { s3Config: { bucketName: 'b' } }, 's3Config'],
    ] as const) {
      const r = await call(t, {
        method: 'POST',
        url: `/v2/${endpointId}/${route}`,
        payload: { input: 1, ...extra },
      });
      expect(r.statusCode, r.body).toBe(400);
      expect(r.json()).toMatchObject({ error: 'NOT_SUPPORTED', details: { field } });
    }
    expect(await t.context.db.prisma.endpointJob.count({ where: { endpointId } })).toBe(before);
    // RunPod sets a ttl through /status?ttl=; here it is set once, by policy.ttl.
    const queued = await run();
    const expires = (await call(t, { url: `/v2/${endpointId}/status/${queued}` })).json().expiresAt;
    const ttl = await call(t, { url: `/v2/${endpointId}/status/${queued}?ttl=6000` });
    expect(ttl.statusCode, ttl.body).toBe(400);
    expect(ttl.json()).toMatchObject({ error: 'NOT_SUPPORTED', details: { field: 'ttl' } });
    expect((await call(t, { url: `/v2/${endpointId}/status/${queued}` })).json().expiresAt).toBe(expires);
    // lowPriority false is what every job does: accepted.
    const normal = await call(t, {
      method: 'POST',
      url: `/v2/${endpointId}/run`,
      payload: { input: 1, policy: { lowPriority: false } },
    });
    expect(normal.statusCode, normal.body).toBe(200);
  });
});

import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addMember, addResource, type TestMember } from '../../testing/accounts.ts';
import { seedJob } from '../../testing/experiment-jobs.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

/**
 * Training jobs are account resources as clusters are: a developer reads a teammate's job (the role's
 * team read) but may stop, resume or tune only their own, unless a share or grant gives write on it; a
 * team manager may change any. Over real HTTP on loopback.
 */
describe('training jobs: per-member ownership, shares and grants', () => {
  let t: TestApp;
  let base: string;
  let ann: TestMember;
  let bob: TestMember;
  let jobId: string;

  beforeEach(async () => {
    t = await createTestApp();
    base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    ann = await addMember(t, { role: 'developer', name: 'Ann' });
    bob = await addMember(t, { role: 'developer', name: 'Bob' });
    jobId = await seedJob(t, { userId: ann.userId, status: 'pending', name: 'anns-run' });
    // Waiting for GPUs, as the supervisor leaves a job it could not place yet.
    await t.context.db.prisma.trainingJob.update({ where: { id: jobId }, data: { status: 'queued' } });
    await addResource(t, ann, jobId, 'anns-run');
  });
  afterEach(async () => t.close());

  const http = async (method: string, path: string, key: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const status = async () =>
    (await t.context.db.prisma.trainingJob.findUniqueOrThrow({ where: { id: jobId } })).status;

  it("refuses a teammate's stop, resume and tune, and lets the owner stop it", async () => {
    expect((await http('GET', `/v2/training/jobs/${jobId}`, bob.key)).status).toBe(200);
    const stop = await http('POST', `/v2/training/jobs/${jobId}/stop`, bob.key, {});
    expect(stop.status).toBe(403);
    expect(stop.body['error']).toBe('INSUFFICIENT_PERMISSIONS');
    const resume = await http('POST', `/v2/training/jobs/${jobId}/resume`, bob.key, {});
    expect(resume.status).toBe(403);
    const tune = await http('POST', `/v2/training/jobs/${jobId}/tune`, bob.key, {
      hyperparameters: { learning_rate: [0.001, 0.01] },
      maxTrials: 2,
    });
    expect(tune.status).toBe(403);
    expect(await status()).toBe('queued');
    expect(await t.context.db.prisma.tuningJob.count()).toBe(0);

    const own = await http('POST', `/v2/training/jobs/${jobId}/stop`, ann.key, {});
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect(await status()).toBe('cancelled');
  });

  it('a share for write lets a teammate stop it; a team manager may without one', async () => {
    const shared = await http('POST', `/v2/accounts/permissions/resources/${jobId}/share`, ann.key, {
      users: [bob.userId],
      permissions: ['write'],
    });
    expect(shared.status, JSON.stringify(shared.body)).toBe(200);
    const stop = await http('POST', `/v2/training/jobs/${jobId}/stop`, bob.key, {});
    expect(stop.status, JSON.stringify(stop.body)).toBe(200);
    expect(await status()).toBe('cancelled');

    const other = await seedJob(t, { userId: ann.userId, status: 'pending', name: 'second' });
    await t.context.db.prisma.trainingJob.update({ where: { id: other }, data: { status: 'queued' } });
    // Not in the resource directory (as jobs from before it): the owner on the job row decides.
    expect((await http('POST', `/v2/training/jobs/${other}/stop`, bob.key, {})).status).toBe(403);
    expect((await http('POST', `/v2/training/jobs/${other}/stop`, t.ownerKey, {})).status).toBe(200);
  });
});

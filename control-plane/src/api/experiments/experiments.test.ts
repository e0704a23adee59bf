import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, addMember, call as callApi, type TestMember } from '../../testing/accounts.ts';
import { seedJob } from '../../testing/experiment-jobs.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

describe('experiments API: lifecycle, runs, access', () => {
  let t: TestApp;
  let clock: ManualClock;
  let other: TestMember;
  let viewer: TestMember;

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-11-27T10:00:00Z'));
    t = await createTestApp({ clock });
    other = await addAccount(t, 'Other');
    viewer = await addMember(t, { role: 'viewer' });
  });
  afterAll(async () => {
    await t.close();
  });

  const call = (method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown, key?: string) =>
    callApi(t, { method, url, payload, key });

  const create = async (body: Record<string, unknown>, key?: string) => {
    const res = await call('POST', '/v2/training/experiments', body, key);
    expect(res.statusCode, res.body).toBe(201);
    return res.json();
  };

  it('creates an experiment, active and empty, with statistics from no runs', async () => {
    const created = await create({
      name: '  LR sweep ',
      description: 'Does a higher learning rate help?',
      hypothesis: 'lr 1e-3 beats 1e-4',
      tags: ['lr', 'llm'],
      metadata: { owner: 'ml-team' },
      baseline: { type: 'model', name: 'v1', metrics: { loss: 0.5 } },
    });
    expect(created).toEqual({
      id: expect.stringMatching(/^exp_[a-z0-9]{20}$/),
      name: 'LR sweep',
      description: 'Does a higher learning rate help?',
      status: 'active',
      hypothesis: 'lr 1e-3 beats 1e-4',
      tags: ['lr', 'llm'],
      primaryMetric: { name: 'loss', direction: 'minimize' },
      runCount: 0,
      clonedFrom: null,
      createdAt: '2026-11-27T10:00:00.000Z',
      updatedAt: '2026-11-27T10:00:00.000Z',
      completedAt: null,
      archivedAt: null,
      metadata: { owner: 'ml-team' },
      baseline: { type: 'model', name: 'v1', metrics: { loss: 0.5 } },
      conclusion: null,
      archive: null,
      runs: [],
      statistics: {
        total_runs: 0,
        completed_runs: 0,
        running_runs: 0,
        failed_runs: 0,
        best_metric: null,
        best_run: null,
        total_cost: null,
        total_training_time: null,
        total_gpu_hours: null,
      },
      insights: [],
    });
    const read = await call('GET', `/v2/training/experiments/${created.id}`);
    expect(read.json()).toEqual(created);
  });

  it('refuses bad input with the flat error shape and writes nothing', async () => {
    const before = await t.context.db.prisma.experiment.count();
    for (const body of [
      { description: 'no name' },
      { name: 'x'.repeat(101), description: 'd' },
      { name: '   ', description: 'd' },
      { name: 'no description' },
      { name: 'n', description: 'd', extra: true },
      { name: 'n', description: 'd', tags: 'not-an-array' },
      { name: 'n', description: 'd', baseline: { metrics: { loss: 'low' } } },
    ]) {
      const res = await call('POST', '/v2/training/experiments', body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json()).toMatchObject({ error: 'VALIDATION_ERROR', code: 400, details: expect.any(Object) });
    }
    expect(await t.context.db.prisma.experiment.count()).toBe(before);
    const bad = await call('GET', '/v2/training/experiments/not-an-id');
    expect(bad.statusCode).toBe(400);
    const missing = await call('GET', '/v2/training/experiments/exp_doesnotexist');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({
      error: 'EXPERIMENT_NOT_FOUND',
      message: expect.any(String),
      code: 404,
      details: { experimentId: 'exp_doesnotexist' },
    });
  });

  it('lists with status and every-tag filters, sorting and pagination', async () => {
    const account = await addAccount(t, 'Lister');
    const made: string[] = [];
    for (const [name, tags] of [
      ['b-one', ['vision', 'resnet']],
      ['a-two', ['vision']],
      ['c-three', ['llm', 'resnet', 'vision']],
    ] as const) {
      made.push((await create({ name, description: 'd', tags }, account.key)).id);
      clock.advance(1000);
    }
    await call('POST', `/v2/training/experiments/${made[1]}/archive`, {}, account.key);
    const list = async (query: string) => {
      const res = await call('GET', `/v2/training/experiments${query}`, undefined, account.key);
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    };
    const all = await list('');
    expect(all.experiments.map((e: { name: string }) => e.name)).toEqual(['c-three', 'a-two', 'b-one']);
    expect(all.pagination).toEqual({ total: 3, limit: 50, offset: 0, hasMore: false });
    expect((await list('?tags=vision,resnet')).experiments.map((e: { name: string }) => e.name)).toEqual([
      'c-three',
      'b-one',
    ]);
    expect((await list('?status=archived')).experiments.map((e: { id: string }) => e.id)).toEqual([made[1]]);
    const page = await list('?sort=name&order=asc&limit=2&offset=1');
    expect(page.experiments.map((e: { name: string }) => e.name)).toEqual(['b-one', 'c-three']);
    expect(page.pagination).toEqual({ total: 3, limit: 2, offset: 1, hasMore: false });
    expect(page.experiments[0]).toMatchObject({ runCount: 0, status: 'active' });
    expect((await call('GET', '/v2/training/experiments?limit=101', undefined, account.key)).statusCode).toBe(
      400,
    );
    expect(
      (await call('GET', '/v2/training/experiments?status=done', undefined, account.key)).statusCode,
    ).toBe(400);
  });

  it('links a training job as a run and shows what the job does, live', async () => {
    clock.set('2026-11-27T10:00:00Z');
    const experiment = await create({ name: 'live', description: 'd' });
    const jobId = await seedJob(t, {
      name: 'bert-small',
      status: 'running',
      parameters: { learning_rate: 0.001, batch_size: 32 },
      reports: [
        { loss: 0.9, accuracy: 0.5 },
        { loss: 0.7, accuracy: 0.6 },
        { loss: 0.8, accuracy: 0.65 },
      ],
      hourlyRate: 2,
    });
    const res = await call('POST', `/v2/training/experiments/${experiment.id}/runs`, {
      trainingJobId: jobId,
      parameters: { learning_rate: 0.001, architecture: 'bert' },
      tags: ['first'],
      notes: 'baseline config',
    });
    expect(res.statusCode, res.body).toBe(201);
    const run = res.json();
    expect(run).toEqual({
      id: expect.stringMatching(/^run_/),
      experimentId: experiment.id,
      trainingJobId: jobId,
      name: 'bert-small',
      status: 'running',
      parameters: { learning_rate: 0.001, batch_size: 32, architecture: 'bert' },
      metrics: {
        current: { loss: 0.8, accuracy: 0.65 },
        best: { loss: 0.7, accuracy: 0.65 },
        final: null,
      },
      artifacts: [],
      tags: ['first'],
      notes: 'baseline config',
      // 2 h of the open session (08:00 to the clock's now) at $2/h on 1 GPU.
      cost: 4,
      gpuHours: 2,
      trainingTimeSeconds: 7200,
      startedAt: '2026-11-27T08:00:00.000Z',
      copiedFromRunId: null,
      createdAt: clock.now().toISOString(),
      updatedAt: clock.now().toISOString(),
      completedAt: null,
    });

    // The job goes on and completes: the run follows without being touched.
    await t.context.db.prisma.trainingMetric.create({
      data: { jobId, step: 4, epoch: null, values: { loss: 0.6, accuracy: 0.7 }, at: clock.now() },
    });
    await t.context.db.prisma.trainingJob.update({
      where: { id: jobId },
      data: { status: 'completed', completedAt: new Date('2026-11-27T09:30:00Z') },
    });
    const read = (await call('GET', `/v2/training/experiments/${experiment.id}`)).json();
    expect(read.runs[0]).toMatchObject({
      status: 'completed',
      metrics: {
        current: { loss: 0.6, accuracy: 0.7 },
        best: { loss: 0.6, accuracy: 0.7 },
        final: { loss: 0.6, accuracy: 0.7 },
      },
      trainingTimeSeconds: 5400,
      completedAt: '2026-11-27T09:30:00.000Z',
    });
    expect(read.statistics).toMatchObject({ total_runs: 1, completed_runs: 1, best_metric: 0.6 });
    expect(read.runCount).toBe(1);

    // A run whose job row is gone shows it rather than vanishing.
    await t.context.db.prisma.trainingJob.delete({ where: { id: jobId } });
    const gone = (await call('GET', `/v2/training/experiments/${experiment.id}`)).json();
    expect(gone.runs[0]).toMatchObject({
      status: 'deleted',
      cost: null,
      metrics: { current: {}, final: null },
    });
  });

  it('refuses a job already in an experiment, a foreign job and parameters the job contradicts', async () => {
    const first = await create({ name: 'first', description: 'd' });
    const second = await create({ name: 'second', description: 'd' });
    const jobId = await seedJob(t, { status: 'completed', parameters: { learning_rate: 0.01 } });
    const link = (experimentId: string, body: Record<string, unknown>, key?: string) =>
      call('POST', `/v2/training/experiments/${experimentId}/runs`, body, key);
    const linked = await link(first.id, { trainingJobId: jobId, name: 'kept' });
    expect(linked.statusCode).toBe(201);
    for (const target of [second.id, first.id]) {
      const again = await link(target, { trainingJobId: jobId });
      expect(again.statusCode).toBe(409);
      expect(again.json()).toEqual({
        error: 'RUN_ALREADY_EXISTS',
        message: expect.any(String),
        code: 409,
        details: { trainingJobId: jobId, existingExperimentId: first.id, existingRunId: linked.json().id },
      });
    }
    const foreignJob = await seedJob(t, {
      status: 'completed',
      accountId: other.accountId,
      userId: other.userId,
    });
    const foreign = await link(second.id, { trainingJobId: foreignJob });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json()).toMatchObject({
      error: 'TRAINING_JOB_NOT_FOUND',
      details: { trainingJobId: foreignJob },
    });
    const fresh = await seedJob(t, { status: 'completed', parameters: { learning_rate: 0.01 } });
    const contradicting = await link(second.id, { trainingJobId: fresh, parameters: { learning_rate: 0.1 } });
    expect(contradicting.statusCode).toBe(400);
    expect(contradicting.json()).toMatchObject({
      error: 'VALIDATION_ERROR',
      details: { field: 'parameters.learning_rate', given: 0.1, jobValue: 0.01 },
    });
    expect(await t.context.db.prisma.experimentRun.count({ where: { experimentId: second.id } })).toBe(0);
  });

  it('lets exactly one of two concurrent links of the same job through', async () => {
    const a = await create({ name: 'race a', description: 'd' });
    const b = await create({ name: 'race b', description: 'd' });
    const jobId = await seedJob(t, { status: 'running' });
    const results = await Promise.all(
      [a.id, b.id].map((id) => call('POST', `/v2/training/experiments/${id}/runs`, { trainingJobId: jobId })),
    );
    expect(results.map((r) => r.statusCode).sort()).toEqual([201, 409]);
    expect(await t.context.db.prisma.experimentRun.count({ where: { trainingJobId: jobId } })).toBe(1);
    // Either experiment may win the race; only `a` gets more runs below.
    const aWon = results[0]?.statusCode === 201;

    // Concurrent links of different jobs into one experiment all land, each with its own place.
    const jobs = await Promise.all([0, 1, 2].map(() => seedJob(t, { status: 'running' })));
    const linked = await Promise.all(
      jobs.map((id) => call('POST', `/v2/training/experiments/${a.id}/runs`, { trainingJobId: id })),
    );
    expect(linked.map((r) => r.statusCode)).toEqual([201, 201, 201]);
    const rows = await t.context.db.prisma.experimentRun.findMany({
      where: { experimentId: a.id },
      orderBy: { position: 'asc' },
    });
    expect(rows.map((r) => r.position)).toEqual(aWon ? [1, 2, 3, 4] : [1, 2, 3]);
    const shown = (await call('GET', `/v2/training/experiments/${a.id}`)).json();
    expect(shown.runs.map((r: { id: string }) => r.id)).toEqual(rows.map((r) => r.id));
  });

  it('updates fields and status; archive is final, idempotent and closes the experiment to runs', async () => {
    const experiment = await create({ name: 'lifecycle', description: 'd', tags: ['x'] });
    const url = `/v2/training/experiments/${experiment.id}`;
    clock.advance(60_000);
    const done = await call('PATCH', url, {
      status: 'completed',
      conclusion: 'lr 1e-3 wins',
      tags: ['x', 'y'],
    });
    expect(done.statusCode, done.body).toBe(200);
    expect(done.json()).toMatchObject({
      status: 'completed',
      conclusion: 'lr 1e-3 wins',
      tags: ['x', 'y'],
      completedAt: clock.now().toISOString(),
      updatedAt: clock.now().toISOString(),
    });
    const reopened = (await call('PATCH', url, { status: 'active', conclusion: null })).json();
    expect(reopened).toMatchObject({ status: 'active', completedAt: null, conclusion: null });
    expect((await call('PATCH', url, {})).statusCode).toBe(400);
    expect((await call('PATCH', url, { status: 'archived' })).statusCode).toBe(400);

    const archived = await call('POST', `${url}/archive`, {
      reason: 'superseded',
      preserve_artifacts: false,
    });
    expect(archived.statusCode, archived.body).toBe(200);
    expect(archived.json()).toEqual({
      id: experiment.id,
      name: 'lifecycle',
      status: 'archived',
      previousStatus: 'active',
      archivedAt: clock.now().toISOString(),
      reason: 'superseded',
      preserveArtifacts: false,
      runs: 0,
      alreadyArchived: false,
    });
    clock.advance(1000);
    const again = (await call('POST', `${url}/archive`, { reason: 'retry' })).json();
    expect(again).toMatchObject({ alreadyArchived: true, reason: 'superseded', previousStatus: null });
    expect((await call('GET', url)).json().archive).toEqual({
      reason: 'superseded',
      preserveArtifacts: false,
      archivedAt: archived.json().archivedAt,
    });

    const jobId = await seedJob(t, { status: 'completed' });
    const refused = await call('POST', `${url}/runs`, { trainingJobId: jobId });
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({
      error: 'EXPERIMENT_ARCHIVED',
      details: { experimentId: experiment.id },
    });
    const statusChange = await call('PATCH', url, { status: 'completed' });
    expect(statusChange.statusCode).toBe(409);
    // Annotations stay possible.
    const annotated = await call('PATCH', url, { conclusion: 'kept for the record' });
    expect(annotated.json()).toMatchObject({ status: 'archived', conclusion: 'kept for the record' });
  });

  it('clones with modifications and, when asked, copies of the runs sharing their jobs', async () => {
    const source = await create({
      name: 'source',
      description: 'original',
      hypothesis: 'h',
      tags: ['a'],
      metadata: { team: 'nlp', seed: 1 },
      baseline: { name: 'v0', metrics: { loss: 1 } },
    });
    const jobId = await seedJob(t, {
      status: 'completed',
      reports: [{ loss: 0.4 }],
      parameters: { lr: 0.1 },
    });
    const run = (
      await call('POST', `/v2/training/experiments/${source.id}/runs`, { trainingJobId: jobId, notes: 'n' })
    ).json();
    await call('POST', `/v2/training/experiments/${source.id}/archive`, {});

    const plain = await call('POST', `/v2/training/experiments/${source.id}/clone`, {});
    expect(plain.statusCode, plain.body).toBe(201);
    expect(plain.json()).toMatchObject({
      name: 'source (copy)',
      description: 'original',
      status: 'active',
      hypothesis: 'h',
      tags: ['a'],
      metadata: { team: 'nlp', seed: 1 },
      baseline: { name: 'v0', metrics: { loss: 1 } },
      clonedFrom: source.id,
      runs: [],
    });

    const copied = await call('POST', `/v2/training/experiments/${source.id}/clone`, {
      name: 'follow-up',
      description: 'with more data',
      modifications: { hypothesis: null, tags: ['b'], metadata: { seed: 2 }, baseline: null },
      copy_runs: true,
    });
    expect(copied.statusCode, copied.body).toBe(201);
    const clone = copied.json();
    expect(clone).toMatchObject({
      name: 'follow-up',
      description: 'with more data',
      hypothesis: null,
      tags: ['b'],
      metadata: { team: 'nlp', seed: 2 },
      baseline: null,
      runCount: 1,
    });
    expect(clone.runs).toEqual([
      expect.objectContaining({
        id: expect.not.stringMatching(run.id),
        experimentId: clone.id,
        trainingJobId: jobId,
        notes: 'n',
        copiedFromRunId: run.id,
        status: 'completed',
        metrics: { current: { loss: 0.4 }, best: { loss: 0.4 }, final: { loss: 0.4 } },
      }),
    ]);
    // The clone is active: it takes new runs, but the copied job is still linked to the source.
    const relink = await call('POST', `/v2/training/experiments/${clone.id}/runs`, { trainingJobId: jobId });
    expect(relink.statusCode).toBe(409);
    expect(relink.json().details).toEqual({
      trainingJobId: jobId,
      existingExperimentId: clone.id,
      existingRunId: clone.runs[0].id,
    });
    const third = await create({ name: 'third', description: 'd' });
    const elsewhere = await call('POST', `/v2/training/experiments/${third.id}/runs`, {
      trainingJobId: jobId,
    });
    expect(elsewhere.json()).toMatchObject({
      error: 'RUN_ALREADY_EXISTS',
      details: { existingExperimentId: source.id, existingRunId: run.id },
    });
    const bad = await call('POST', `/v2/training/experiments/${source.id}/clone`, {
      modifications: { status: 'active' },
    });
    expect(bad.statusCode).toBe(400);
  });

  it('keeps accounts apart and checks key permission, key scope and member role', async () => {
    const mine = await create({ name: 'private', description: 'd' });
    const base = `/v2/training/experiments/${mine.id}`;
    for (const [method, url, body] of [
      ['GET', base, undefined],
      ['PATCH', base, { name: 'stolen' }],
      ['POST', `${base}/runs`, { trainingJobId: 'job_x' }],
      ['POST', `${base}/archive`, {}],
      ['POST', `${base}/clone`, {}],
      ['POST', `${base}/export`, {}],
      ['POST', `${base}/compare`, {}],
    ] as const) {
      const res = await call(method, url, body, other.key);
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.json()).toMatchObject({ error: 'EXPERIMENT_NOT_FOUND', details: { experimentId: mine.id } });
    }
    const list = (await call('GET', '/v2/training/experiments', undefined, other.key)).json();
    expect(list.experiments.map((e: { id: string }) => e.id)).not.toContain(mine.id);

    // A viewer reads and compares but does not change anything.
    expect((await call('GET', base, undefined, viewer.key)).statusCode).toBe(200);
    const denied = await call(
      'POST',
      '/v2/training/experiments',
      { name: 'v', description: 'd' },
      viewer.key,
    );
    expect(denied.statusCode).toBe(403);
    expect(denied.json()).toMatchObject({ error: 'INSUFFICIENT_PERMISSIONS' });
    expect((await call('POST', `${base}/archive`, {}, viewer.key)).statusCode).toBe(403);
    const compare = await call('POST', `${base}/compare`, {}, viewer.key);
    expect(compare.json()).toMatchObject({ error: 'INSUFFICIENT_RUNS' });

    const readKey = await addMember(t, {
      role: 'developer',
      keyPermissions: ['read'],
      keyScopes: ['training'],
    });
    const readOnly = await call(
      'POST',
      '/v2/training/experiments',
      { name: 'r', description: 'd' },
      readKey.key,
    );
    expect(readOnly.statusCode).toBe(403);
    expect(readOnly.json()).toMatchObject({ error: 'FORBIDDEN', required_permission: 'training:write' });
    const unscoped = await addMember(t, { role: 'admin', keyScopes: ['clusters'] });
    expect((await call('GET', '/v2/training/experiments', undefined, unscoped.key)).statusCode).toBe(403);
    expect((await t.app.inject({ method: 'GET', url: '/v2/training/experiments' })).statusCode).toBe(401);
    expect((await call('GET', base)).json().name).toBe('private');
  });
});

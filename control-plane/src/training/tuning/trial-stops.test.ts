import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { capturedLogger } from '../../testing/captured-logs.ts';
import { waitFor } from '../../testing/wait.ts';

/**
 * A trial whose stop fails is not left running (and billing) behind a stopped tuning job: the failure is
 * logged with the tuning job's and the trial's ids, and the driver's next step stops it again. No host is
 * ready, so the trials stay queued and a stop cancels them; the first stop is made to fail.
 */
describe('stopping a tuning job whose trial will not stop at first', () => {
  let t: TestApp;
  const { logger, lines } = capturedLogger('info');

  beforeAll(async () => {
    t = await createTestApp({ logger });
  });
  afterAll(async () => t?.close());

  const call = (method: 'GET' | 'POST', url: string, payload?: Record<string, unknown>) =>
    t.app.inject({ method, url, headers: t.auth(), ...(payload ? { payload } : {}) });

  it('logs the failed stop and stops the trial at the next step', async () => {
    // A registered host that never turns ready: H100 trials could fit one day, so they wait queued.
    await t.context.db.prisma.host.create({
      data: {
        id: 'host_trialstops',
        name: 'gpu-ts',
        hostname: 'gpu-ts.internal',
        credentialHash: 't'.repeat(64),
        inventory: {
          gpus: {
            simulated: true,
            devices: [{ index: 0, uuid: 'GPU-ts-0', name: 'NVIDIA H100 80GB HBM3' }],
          },
        },
        simulated: true,
        gpuCount: 1,
      },
    });
    await t.context.clusters.allocator.sync();
    // A ready dataset's row: the trials are never placed, so no bytes are read.
    const datasetId = 'ds_trialstops';
    await t.context.db.prisma.dataset.create({
      data: {
        id: datasetId,
        accountId: t.accountId,
        createdById: t.userId,
        name: 'rows',
        type: 'text',
        format: 'jsonl',
        status: 'ready',
        uploadTokenHash: 'x'.repeat(64),
        uploadTokenExpiresAt: new Date(),
      },
    });
    const base = await call('POST', '/v2/training/jobs', {
      name: 'base',
      modelType: 'custom',
      datasetId,
      gpuType: 'h100',
      config: { image: 'anvil-test/busybox:latest', training: { epochs: 1, learning_rate: 0.01 } },
    });
    expect(base.statusCode, base.body).toBe(201);
    const jobId = base.json().id as string;
    const created = await call('POST', `/v2/training/jobs/${jobId}/tune`, {
      objective: 'minimize',
      metric: 'loss',
      algorithm: 'grid',
      search_space: { learning_rate: { type: 'choice', values: [0.05, 0.01] } },
      max_concurrent: 2,
    });
    expect(created.statusCode, created.body).toBe(201);
    const tuneId = created.json().id as string;
    const trials = () =>
      t.context.db.prisma.trainingJob.findMany({ where: { tuneId }, orderBy: { trialNumber: 'asc' } });
    expect((await trials()).map((j) => j.status)).toEqual(['queued', 'queued']);

    // The first trial's stop fails once (as when the database drops the connection mid-request).
    const service = t.context.training.service;
    const stopJob = vi.spyOn(service, 'stopJob');
    stopJob.mockRejectedValueOnce(new Error('connection terminated'));
    try {
      const stopped = await call('POST', `/v2/training/jobs/${jobId}/tune/${tuneId}/stop`, {});
      expect(stopped.statusCode, stopped.body).toBe(200);
      const logged = lines.find((l) => l['tuneId'] === tuneId && l['level'] === 50);
      expect(logged).toMatchObject({
        component: 'training',
        trialId: expect.stringMatching(/^job_/),
        msg: expect.stringMatching(/stopping a trial failed/),
      });
      const failed = logged!['trialId'] as string;
      expect((await trials()).find((j) => j.id === failed)?.status).toBe('queued');

      // The training supervisor's passes step the tuning job again: the trial is stopped this time.
      await waitFor('the failed trial stopped by a later step', async () =>
        (await trials()).every((j) => j.status === 'cancelled'),
      );
      expect(stopJob.mock.calls.filter(([job]) => job.id === failed).length).toBeGreaterThanOrEqual(2);
    } finally {
      stopJob.mockRestore();
    }
  });
});

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileCredentialStore } from '../../agent/src/connection/credential-store.ts';
import { addAccount, boostRateLimits, call } from '../../control-plane/src/testing/accounts.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { uploadedDataset } from './datasets.ts';
import { TRAINER_SCRIPT } from './trainer.ts';

/**
 * Training jobs end to end: the control plane over HTTP on loopback, a real agent (simulated 2xH100, the
 * only fake) running a busybox trainer that follows the trainer contract in real containers.
 */
/**
 * 40,000 lines of 80 bytes: 3.2 MB, beyond what the desired set can carry (one 4 MiB WebSocket frame,
 * base64), so the trainer sees it only through the agent's download (WorkloadDownload).
 */
const DATASET_LINES = 40_000;
const DATASET = Buffer.from(
  Array.from({ length: DATASET_LINES }, (_, i) => `{"text":"${String(i).padStart(68, '0')}"}\n`).join(''),
);

describe.skipIf(!dockerOrFail('test/training/jobs.e2e.db.test.ts'))(
  'training jobs with a real agent and Docker',
  () => {
    let fleet: ClusterFleet;
    let datasetsDir: string;
    let datasetId: string;

    beforeAll(async () => {
      datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-training-'));
      fleet = await startClusterFleet({ ANVIL_DATASETS_DIR: datasetsDir });
      await fleet.t.context.clusters.prices.set({ H100: 3.6 });
      await boostRateLimits(fleet.t);
      datasetId = await uploadedDataset(fleet.t, DATASET, 'lines');
    }, 300_000);

    afterAll(async () => {
      await fleet?.close();
      await rm(datasetsDir, { recursive: true, force: true });
    });

    const t = () => fleet.t;
    const get = async (id: string) => (await call(t(), { url: `/v2/training/jobs/${id}` })).json();
    const waitStatus = (id: string, status: string, timeoutMs = 180_000) =>
      waitFor(
        `${id} ${status}`,
        async () => {
          const job = await get(id);
          if (job.status === status) return job;
          if (['failed', 'completed', 'stopped', 'cancelled'].includes(job.status) && job.status !== status) {
            throw new Error(`job is ${job.status}: ${job.statusReason}`);
          }
          return null;
        },
        timeoutMs,
      );
    const create = async (
      name: string,
      parameters: Record<string, unknown>,
      extra: Record<string, unknown> = {},
    ) => {
      const res = await call(t(), {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: {
          name,
          modelType: 'custom',
          datasetId,
          gpuType: 'h100',
          config: {
            image: BUSYBOX_IMAGE,
            command: ['sh', '-c', TRAINER_SCRIPT],
            training: { epochs: 2, batch_size: 8, learning_rate: 0.01 },
            parameters,
          },
          ...extra,
        },
      });
      expect(res.statusCode, res.body).toBe(201);
      return res.json();
    };
    const containersOf = async (jobId: string) =>
      fleet.docker.listContainers({ all: true, filters: { label: [`anvil.training-job=${jobId}`] } });

    it('refuses bad configurations, unknown datasets and GPU types no host has, changing nothing', async () => {
      const base = { name: 'bad', modelType: 'llm', datasetId, config: { training: { learning_rate: 0.5 } } };
      const lr = await call(t(), { method: 'POST', url: '/v2/training/jobs', payload: base });
      expect(lr.statusCode).toBe(400);
      expect(lr.json()).toMatchObject({
        error: 'CONFIGURATION_ERROR',
        code: 400,
        details: { field: 'config.training.learning_rate' },
      });
      const short = await call(t(), {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: { name: 's', hyperparameters: { learningRate: 1e-7 }, datasetConfig: { datasetId } },
      });
      expect(short.json()).toMatchObject({
        error: 'CONFIGURATION_ERROR',
        details: { field: 'hyperparameters.learning_rate' },
      });
      const other = await addAccount(t());
      const foreign = await call(t(), {
        method: 'POST',
        url: '/v2/training/jobs',
        key: other,
        payload: { ...base, config: { training: { learning_rate: 0.01 } } },
      });
      expect(foreign.statusCode).toBe(404);
      expect(foreign.json()).toMatchObject({ error: 'DATASET_NOT_FOUND', details: { datasetId } });
      const a100 = await call(t(), {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: { ...base, gpuType: 'a100', config: { training: { learning_rate: 0.01 } } },
      });
      expect(a100.statusCode).toBe(422);
      expect(a100.json()).toMatchObject({
        error: 'INSUFFICIENT_RESOURCES',
        details: { requestedGpuType: 'a100', availableGpuTypes: ['h100'] },
      });
      const tooMany = await call(t(), {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: { ...base, maxWorkers: 3, config: { training: { learning_rate: 0.01 } } },
      });
      expect(tooMany.json()).toMatchObject({ error: 'INSUFFICIENT_RESOURCES' });
      expect(await t().context.db.prisma.trainingJob.count()).toBe(0);
    });

    it('runs a job to completion: hyperparameters and dataset in the container, reports read, billed, containers removed', {
      timeout: 300_000,
    }, async () => {
      const job = await create('complete', { steps_per_epoch: 2, step_seconds: 0.3 });
      expect(['pending', 'queued']).toContain(job.status);
      expect(job.parameters).toMatchObject({ learning_rate: 0.01, epochs: 2, steps_per_epoch: 2 });
      const running = await waitStatus(job.id, 'running').catch(() => null);
      if (running) {
        const [container] = await containersOf(job.id);
        const env = (await fleet.docker.getContainer(container!.Id).inspect()).Config.Env;
        expect(env).toEqual(
          expect.arrayContaining([
            'ANVIL_HP_LEARNING_RATE=0.01',
            'ANVIL_RANK=0',
            'ANVIL_WORLD_SIZE=1',
            `ANVIL_JOB_ID=${job.id}`,
          ]),
        );
      }
      const done = await waitStatus(job.id, 'completed');
      const final = await waitFor('all reports read', async () => {
        const j = await get(job.id);
        return j.checkpoints.length === 2 && j.progress.currentStep === 4 ? j : null;
      });
      expect(done.exitCode).toBe(0);
      expect(final.metrics.currentLoss).toBeCloseTo(1 / 5 + 0.01, 5);
      expect(final.metrics.bestLoss).toBeCloseTo(1 / 5 + 0.01, 5);
      expect(final.metrics.learningRate).toBe(0.01);
      // throughput reports the dataset's line count: the whole file reached the container.
      expect(final.metrics.throughput).toBe(DATASET_LINES);
      // The download route answers only the host's own credential, and only for jobs placed on it.
      const version = await t().context.db.prisma.datasetVersion.findFirstOrThrow({ where: { datasetId } });
      const path = `/agent/v1/downloads/datasets/${datasetId}/versions/${version.id}`;
      const { credential, hostId } = (await fileCredentialStore(fleet.agent.stateDir).load())!;
      const fetchAs = (headers: Record<string, string>) => t().app.inject({ url: path, headers });
      expect((await fetchAs({})).statusCode).toBe(401);
      expect((await fetchAs({ authorization: 'Bearer wrong', 'x-anvil-host-id': hostId })).statusCode).toBe(
        401,
      );
      // The job finished: nothing of its host needs the dataset any more.
      expect(
        (await fetchAs({ authorization: `Bearer ${credential}`, 'x-anvil-host-id': hostId })).statusCode,
      ).toBe(404);
      expect(final.progress).toMatchObject({
        currentStep: 4,
        totalSteps: 4,
        currentEpoch: 2,
        percentage: 100,
      });
      expect(final.checkpoints.map((c: { path: string }) => c.path)).toEqual(['step-2', 'step-4']);
      expect(final.resourceUsage.gpuHours).toBeGreaterThan(0);
      expect(final.resourceUsage.cost).toBeCloseTo(final.resourceUsage.gpuHours * 3.6, 3);
      const usage = await t().context.db.prisma.usageRecord.findMany({
        where: { resourceId: job.id, kind: 'gpu_compute' },
      });
      expect(usage).toHaveLength(1);
      expect(usage[0]).toMatchObject({ resourceType: 'training_job', gpuCount: 1 });
      await waitFor('containers removed', async () => (await containersOf(job.id)).length === 0);
      const list = (await call(t(), { url: '/v2/training/jobs?status=completed' })).json();
      expect(list.jobs.map((j: { id: string }) => j.id)).toContain(job.id);
      expect(list.jobs[0].metrics.loss).toBeCloseTo(0.21, 5);
      // The dataset is in use now.
      const del = await call(t(), { method: 'DELETE', url: `/v2/training/datasets/${datasetId}` });
      expect(del.statusCode).toBe(409);
      expect(del.json()).toMatchObject({ error: 'DATASET_IN_USE' });
    });

    it('gang-places several workers only when all fit, stops with a checkpoint and resumes from it', {
      timeout: 400_000,
    }, async () => {
      const long = await create('long', { steps_per_epoch: 50, step_seconds: 0.3 });
      await waitStatus(long.id, 'running');
      await waitFor('a report', async () => (await get(long.id)).progress.currentStep >= 2);
      const gang = await create('gang', { steps_per_epoch: 50, step_seconds: 0.3 }, { maxWorkers: 2 });
      // One GPU is free, the gang needs two at once: it waits, nothing of it runs.
      expect(gang.status).toBe('queued');
      expect(await containersOf(gang.id)).toHaveLength(0);

      const stopping = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${long.id}/stop`,
        payload: { saveCheckpoint: true, reason: 'make room' },
      });
      expect(stopping.statusCode, stopping.body).toBe(200);
      expect(['stopping', 'stopped']).toContain(stopping.json().status);
      const stopped = await waitStatus(long.id, 'stopped');
      expect(stopped.stopRequest).toMatchObject({ saveCheckpoint: true, reason: 'make room' });
      const again = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${long.id}/stop`,
        payload: {},
      });
      expect(again.json()).toMatchObject({ error: 'INVALID_STATE', details: { current_status: 'stopped' } });

      // The freed GPU lets the gang start: both workers at once, on the two GPUs.
      const gangRunning = await waitStatus(gang.id, 'running');
      expect(gangRunning.resourceAllocation.placement).toHaveLength(2);
      const indices = gangRunning.resourceAllocation.placement.flatMap(
        (p: { gpuIndices: number[] }) => p.gpuIndices,
      );
      expect(indices.sort()).toEqual([0, 1]);
      const ranks = await containersOf(gang.id);
      expect(ranks).toHaveLength(2);
      const kill = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${gang.id}/stop`,
        payload: { saveCheckpoint: false },
      });
      expect(kill.statusCode).toBe(200);
      await waitStatus(gang.id, 'stopped');
      await waitFor('gang containers removed', async () => (await containersOf(gang.id)).length === 0);

      const checkpoint = await waitFor('the SIGTERM checkpoint', async () => {
        const j = await get(long.id);
        return j.checkpoints.at(-1) ?? null;
      });
      const resumed = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${long.id}/resume`,
        payload: {},
      });
      expect(resumed.statusCode, resumed.body).toBe(200);
      expect(resumed.json()).toMatchObject({ attempt: 2, resumedFrom: checkpoint.id });
      await waitStatus(long.id, 'running');
      const [container] = await containersOf(long.id);
      const env = (await fleet.docker.getContainer(container!.Id).inspect()).Config.Env;
      expect(env).toContain(`ANVIL_RESUME_FROM=/anvil/checkpoints/${checkpoint.path}`);
      // The trainer continued from the checkpoint's step rather than from the start.
      await waitFor('a step after the checkpoint', async () => {
        const history = await t().context.db.prisma.trainingMetric.findMany({
          where: { jobId: long.id },
          orderBy: { id: 'desc' },
          take: 1,
        });
        return (history[0]?.step ?? 0) > checkpoint.step;
      });
      const unknown = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${gang.id}/resume`,
        payload: { checkpointId: 'ckpt_nope' },
      });
      expect(unknown.json()).toMatchObject({ error: 'CHECKPOINT_NOT_FOUND' });
      await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${long.id}/stop`,
        payload: { saveCheckpoint: false },
      });
      await waitStatus(long.id, 'stopped');
      await waitFor('containers removed', async () => (await containersOf(long.id)).length === 0);
      const other = await addAccount(t());
      expect((await call(t(), { url: `/v2/training/jobs/${long.id}`, key: other })).statusCode).toBe(404);
    });
    it('tunes a job: trials are real jobs, the best trial is found and deployed, bad spaces and budgets refused', {
      timeout: 400_000,
    }, async () => {
      const base = await create('base', { steps_per_epoch: 2, step_seconds: 0.1 });
      await waitStatus(base.id, 'completed');
      await waitFor('base reports', async () => (await get(base.id)).progress.currentStep === 4);
      const tune = (payload: Record<string, unknown>) =>
        call(t(), { method: 'POST', url: `/v2/training/jobs/${base.id}/tune`, payload });
      const continuous = await tune({
        objective: 'minimize',
        metric: 'loss',
        algorithm: 'grid',
        search_space: { learning_rate: { type: 'log_uniform', min: 0.001, max: 0.1 } },
      });
      expect(continuous.statusCode).toBe(400);
      expect(continuous.json()).toMatchObject({
        error: 'ALGORITHM_NOT_SUPPORTED',
        details: { algorithm: 'grid', unsupportedParameterTypes: ['log_uniform'] },
      });
      const inverted = await tune({
        objective: 'minimize',
        metric: 'loss',
        algorithm: 'random',
        search_space: { learning_rate: { type: 'uniform', min: 0.1, max: 0.01 } },
      });
      expect(inverted.json()).toMatchObject({
        error: 'INVALID_SEARCH_SPACE',
        details: { parameter: 'learning_rate' },
      });
      const poor = await tune({
        objective: 'minimize',
        metric: 'loss',
        algorithm: 'random',
        search_space: { learning_rate: { type: 'choice', values: [0.01, 0.05] } },
        max_trials: 10,
        budget: { max_cost: 0.000001 },
      });
      expect(poor.statusCode).toBe(422);
      expect(poor.json()).toMatchObject({
        error: 'INSUFFICIENT_BUDGET',
        details: { requestedTrials: 10, availableBudget: { maxCost: 0.000001 } },
      });
      expect(await t().context.db.prisma.tuningJob.count()).toBe(0);

      const created = await tune({
        objective: 'minimize',
        metric: 'loss',
        algorithm: 'grid',
        search_space: { learning_rate: { type: 'choice', values: [0.05, 0.01] } },
        max_concurrent: 2,
      });
      expect(created.statusCode, created.body).toBe(201);
      const tuneId = created.json().id;
      expect(created.json()).toMatchObject({ status: 'running', progress: { totalTrials: 2 } });
      const done = await waitFor(
        'tuning completed',
        async () => {
          const res = await call(t(), { url: `/v2/training/jobs/${base.id}/tune/${tuneId}` });
          const body = res.json();
          if (body.status === 'failed') throw new Error(body.statusReason);
          return body.status === 'completed' ? body : null;
        },
        300_000,
      );
      expect(done.trials).toHaveLength(2);
      expect(
        done.trials.map((x: { parameters: { learning_rate: number } }) => x.parameters.learning_rate).sort(),
      ).toEqual([0.01, 0.05]);
      expect(done.bestTrial.parameters.learning_rate).toBe(0.01);
      expect(done.results).toMatchObject({ totalTrials: 2, completedTrials: 2, failedTrials: 0 });
      expect(done.results.bestValue).toBeCloseTo(0.21, 5);
      expect(done.results.baselineValue).toBeCloseTo(0.21, 5);
      expect(done.results.totalCost).toBeGreaterThan(0);
      const trialJobs = (await call(t(), { url: `/v2/training/jobs?tuneId=${tuneId}` })).json().jobs;
      expect(trialJobs).toHaveLength(2);
      const list = (await call(t(), { url: '/v2/training/tune?algorithm=grid' })).json();
      expect(list.tuningJobs.map((x: { id: string }) => x.id)).toContain(tuneId);

      const deployed = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${base.id}/tune/${tuneId}/deploy-best`,
        payload: { name: 'best', epochs: 1 },
      });
      expect(deployed.statusCode, deployed.body).toBe(201);
      expect(deployed.json()).toMatchObject({
        name: 'best',
        sourceTrialId: done.bestTrial.id,
        parameters: { learning_rate: 0.01, epochs: 1 },
      });
      await waitStatus(deployed.json().id, 'completed');

      const short = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${base.id}/tune`,
        payload: {
          hyperparameters: { learningRate: { min: 0.001, max: 0.05 } },
          searchStrategy: 'random',
          maxTrials: 1,
        },
      });
      expect(short.statusCode, short.body).toBe(201);
      expect(short.json()).toMatchObject({ tuningJobId: expect.stringMatching(/^tune_/), status: 'started' });
      const stopped = await call(t(), {
        method: 'POST',
        url: `/v2/training/jobs/${base.id}/tune/${short.json().tuningJobId}/stop`,
        payload: { reason: 'enough', complete_running_trials: false },
      });
      expect(stopped.statusCode, stopped.body).toBe(200);
      await waitFor('short tuning cancelled', async () => {
        const body = (
          await call(t(), { url: `/v2/training/jobs/${base.id}/tune/${short.json().tuningJobId}` })
        ).json();
        return body.status === 'cancelled' ? body : null;
      });
    });
  },
);

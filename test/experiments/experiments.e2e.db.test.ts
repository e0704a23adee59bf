import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boostRateLimits, call } from '../../control-plane/src/testing/accounts.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { uploadedDataset } from '../training/datasets.ts';

/**
 * A trainer (busybox sh, trainer contract) whose loss after step i is 1/(i+1) + ANVIL_HP_FLOOR, with
 * accuracy = 1 − loss: runs with a lower floor end better, by a known margin.
 */
const TRAINER = `
steps=\${ANVIL_HP_STEPS:-6}
i=0
while [ $i -lt $steps ]; do
  i=$((i + 1))
  loss=$(awk "BEGIN{print 1/($i+1) + $ANVIL_HP_FLOOR}")
  accuracy=$(awk "BEGIN{print 1 - $loss}")
  echo "ANVIL_REPORT {\\"type\\":\\"metrics\\",\\"step\\":$i,\\"total_steps\\":$steps,\\"loss\\":$loss,\\"accuracy\\":$accuracy}"
  sleep 0.1
done
`;

const STEPS = 6;

/**
 * Experiments over real training jobs: the control plane on loopback, a real agent (simulated 2xH100, the
 * only fake) running the trainer above in Docker; the experiment reads what the jobs did.
 */
describe.skipIf(!dockerOrFail('test/experiments/experiments.e2e.db.test.ts'))(
  'experiments over real training jobs',
  () => {
    let fleet: ClusterFleet;
    let datasetsDir: string;
    const jobs: Record<string, string> = {};

    beforeAll(async () => {
      datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-experiments-'));
      fleet = await startClusterFleet({ ANVIL_DATASETS_DIR: datasetsDir });
      await fleet.t.context.clusters.prices.set({ H100: 3.6 });
      await boostRateLimits(fleet.t);
      const datasetId = await uploadedDataset(fleet.t, '{"text":"a"}\n{"text":"b"}\n');
      for (const [name, learningRate, floor] of [
        ['low-lr', 0.001, 0.3],
        ['mid-lr', 0.01, 0.1],
      ] as const) {
        const res = await call(fleet.t, {
          method: 'POST',
          url: '/v2/training/jobs',
          payload: {
            name,
            modelType: 'custom',
            datasetId,
            gpuType: 'h100',
            config: {
              image: BUSYBOX_IMAGE,
              command: ['sh', '-c', TRAINER],
              training: { epochs: 1, batch_size: 8, learning_rate: learningRate },
              parameters: { floor, steps: STEPS },
            },
          },
        });
        expect(res.statusCode, res.body).toBe(201);
        jobs[name] = res.json().id;
      }
      for (const id of Object.values(jobs)) {
        await waitFor(
          `${id} completed with every report read`,
          async () => {
            const job = (await call(fleet.t, { url: `/v2/training/jobs/${id}` })).json();
            if (['failed', 'cancelled', 'stopped'].includes(job.status)) throw new Error(`job ${job.status}`);
            return job.status === 'completed' && job.progress?.currentStep === STEPS ? job : null;
          },
          240_000,
        );
      }
    }, 400_000);

    afterAll(async () => {
      await fleet?.close();
      await rm(datasetsDir, { recursive: true, force: true });
    });

    it('groups the jobs as runs and reads their reports, cost and time; compares and exports them', async () => {
      const t = fleet.t;
      const created = await call(t, {
        method: 'POST',
        url: '/v2/training/experiments',
        payload: { name: 'floors', description: 'two floors', baseline: { metrics: { loss: 0.5 } } },
      });
      expect(created.statusCode, created.body).toBe(201);
      const experimentId = created.json().id;
      for (const jobId of Object.values(jobs)) {
        const linked = await call(t, {
          method: 'POST',
          url: `/v2/training/experiments/${experimentId}/runs`,
          payload: { trainingJobId: jobId },
        });
        expect(linked.statusCode, linked.body).toBe(201);
      }

      const experiment = (await call(t, { url: `/v2/training/experiments/${experimentId}` })).json();
      const [low, mid] = experiment.runs;
      expect(low).toMatchObject({ name: 'low-lr', status: 'completed', trainingJobId: jobs['low-lr'] });
      expect(low.parameters).toMatchObject({ learning_rate: 0.001, floor: 0.3, steps: STEPS });
      expect(low.metrics.final.loss).toBeCloseTo(1 / (STEPS + 1) + 0.3, 5);
      expect(mid.metrics.final.loss).toBeCloseTo(1 / (STEPS + 1) + 0.1, 5);
      expect(mid.metrics.best.accuracy).toBeCloseTo(1 - (1 / (STEPS + 1) + 0.1), 5);
      for (const run of [low, mid]) {
        expect(run.cost).toBeGreaterThan(0);
        expect(run.cost).toBeCloseTo(run.gpuHours * 3.6, 3);
        expect(run.trainingTimeSeconds).toBeGreaterThanOrEqual(0);
        expect(run.completedAt).not.toBeNull();
      }
      expect(experiment.statistics).toMatchObject({
        total_runs: 2,
        completed_runs: 2,
        running_runs: 0,
        failed_runs: 0,
        best_run: { id: mid.id, metric: 'loss' },
      });
      expect(experiment.statistics.total_cost).toBeCloseTo(low.cost + mid.cost, 6);
      expect(experiment.insights.map((i: { type: string }) => i.type)).toEqual([
        'best_run',
        'baseline_comparison',
      ]);

      const compared = await call(t, {
        method: 'POST',
        url: `/v2/training/experiments/${experimentId}/compare`,
        payload: {},
      });
      expect(compared.statusCode, compared.body).toBe(200);
      const result = compared.json();
      expect(result.metrics.map((m: { name: string }) => m.name)).toEqual(['loss', 'accuracy']);
      expect(result.rankings[0].ranking.map((r: { runId: string }) => r.runId)).toEqual([mid.id, low.id]);
      // Same curve shifted by 0.2: equal variances, a clear difference.
      const [test] = result.statistical_analysis.tests;
      expect(test).toMatchObject({
        metric: 'loss',
        runA: mid.id,
        runB: low.id,
        nA: 5,
        nB: 5,
        significant: true,
      });
      expect(test.meanB - test.meanA).toBeCloseTo(0.2, 5);
      expect(result.pareto_frontier).toEqual([expect.objectContaining({ runId: mid.id })]);

      const exported = await call(t, {
        method: 'POST',
        url: `/v2/training/experiments/${experimentId}/export`,
        payload: { include: ['parameters', 'metrics'] },
      });
      expect(exported.statusCode).toBe(200);
      const [header, first] = exported.body.split('\r\n');
      expect(header).toContain('param.floor');
      expect(header).toContain('metric.loss.final');
      expect(first).toContain(`${low.id},low-lr,${jobs['low-lr']},completed`);
    });
  },
);

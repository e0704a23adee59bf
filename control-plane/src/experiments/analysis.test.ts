import { describe, expect, it } from 'vitest';
import type { ExperimentRun } from '../db/generated/client.ts';
import type { MetricPoint, TrainingJobSummary } from '../training/summary.ts';
import { experimentInsights, experimentStatistics } from './analysis.ts';
import { directionOf, finalWindow, observeRun } from './metrics.ts';
import type { RunState } from './runs.ts';

const at = new Date('2026-11-27T10:00:00Z');

function job(id: string, overrides: Partial<TrainingJobSummary> = {}): TrainingJobSummary {
  return {
    id,
    accountId: 'acc_a',
    name: id,
    status: 'completed',
    parameters: {},
    metrics: { currentLoss: null, bestLoss: null, learningRate: null, throughput: null },
    gpuHours: null,
    cost: null,
    startedAt: '2026-11-27T08:00:00.000Z',
    completedAt: '2026-11-27T09:00:00.000Z',
    createdAt: '2026-11-27T08:00:00.000Z',
    modelType: 'custom',
    datasetId: null,
    tuneId: null,
    ...overrides,
  };
}

const points = (values: Record<string, number>[]): MetricPoint[] =>
  values.map((v, i) => ({ step: i + 1, epoch: null, at: at.toISOString(), values: v }));

function state(index: number, summary: TrainingJobSummary | null, history: MetricPoint[]): RunState {
  const row = {
    id: `run_${index}`,
    experimentId: 'exp_a',
    accountId: 'acc_a',
    createdById: 'usr_a',
    trainingJobId: summary?.id ?? `job_gone${index}`,
    position: index + 1,
    name: `run ${index}`,
    parameters: {},
    tags: [],
    notes: null,
    copiedFromRunId: null,
    createdAt: at,
    updatedAt: at,
  } satisfies ExperimentRun;
  return { row, job: summary, observations: observeRun(summary, history) };
}

describe('experiment metrics and insights', () => {
  it('names directions from the words of a metric', () => {
    for (const metric of [
      'loss',
      'val_loss',
      'bestLoss',
      'error_rate',
      'eval/perplexity',
      'p95_latency_ms',
    ]) {
      expect(directionOf(metric), metric).toBe('minimize');
    }
    for (const metric of ['accuracy', 'f1', 'bleu', 'throughput', 'lossless_ratio']) {
      expect(directionOf(metric), metric).toBe('maximize');
    }
  });

  it('takes the last 20% of a history, at least 5 values', () => {
    expect(finalWindow([1, 2, 3])).toEqual([1, 2, 3]);
    expect(finalWindow([1, 2, 3, 4, 5, 6, 7])).toEqual([3, 4, 5, 6, 7]);
    expect(finalWindow(Array.from({ length: 40 }, (_, i) => i))).toEqual([32, 33, 34, 35, 36, 37, 38, 39]);
  });

  it('observes current, best and final per metric, and falls back to the summary without history', () => {
    const running = observeRun(
      job('job_a', { status: 'running' }),
      points([{ loss: 0.5, accuracy: 0.7 }, { loss: 0.6 }, { accuracy: 0.65, loss: Number.NaN }]),
    );
    expect(running.metrics).toEqual({
      current: { loss: 0.6, accuracy: 0.65 },
      best: { loss: 0.5, accuracy: 0.7 },
      final: null,
    });
    expect(running.series.get('loss')).toEqual([0.5, 0.6]);
    const bare = observeRun(
      job('job_b', { metrics: { currentLoss: 0.4, bestLoss: 0.35, learningRate: 0.01, throughput: null } }),
      [],
    );
    expect(bare.metrics).toEqual({
      current: { loss: 0.4, learning_rate: 0.01 },
      best: { loss: 0.35, learning_rate: 0.01 },
      final: { loss: 0.4, learning_rate: 0.01 },
    });
  });

  it('finds a cheaper run as good as the best, and a parameter that goes with the metric', () => {
    const losses = [0.3, 0.302, 0.35, 0.4, 0.5];
    const states = losses.map((loss, i) =>
      state(
        i,
        job(`job_${i}`, {
          parameters: { learning_rate: 0.001 * 2 ** i, optimizer: 'adamw' },
          cost: i === 1 ? 4 : 10,
        }),
        points([{ loss: loss + 0.1 }, { loss }]),
      ),
    );
    const insights = experimentInsights(states, 'loss', null);
    expect(insights.map((i) => i.type)).toEqual(['best_run', 'cost_efficiency', 'parameter_correlation']);
    expect(insights[1]).toMatchObject({
      savings: 6,
      confidence: null,
      evidence: { bestRun: { id: 'run_0', cost: 10 }, cheaperRun: { id: 'run_1', cost: 4, value: 0.302 } },
    });
    // Five runs in perfect order: exact two-sided p = 2/5! (Spearman).
    expect(insights[2]).toMatchObject({ evidence: { parameter: 'learning_rate', spearman: 1, n: 5 } });
    expect(insights[2]!.evidence['pValue']).toBeCloseTo(2 / 120, 12);
    expect(insights[2]!.confidence).toBeCloseTo(1 - 2 / 120, 5);
    expect(insights[2]!.message).toContain('Lower learning_rate goes with better loss');
    // best_run: two reports each, the runner-up 0.002 behind: a Welch test backs the claim.
    expect(insights[0]!.evidence['test']).toMatchObject({ name: 'welch_t' });
  });

  it('sums what runs have and leaves null what none has', () => {
    const now = new Date('2026-11-27T11:00:00Z');
    const states = [
      state(0, job('job_0', { cost: 1.5, gpuHours: 0.5 }), []),
      state(1, job('job_1', { status: 'running', completedAt: null, cost: 2, gpuHours: 1 }), []),
      state(2, job('job_2', { status: 'pending', startedAt: null, completedAt: null }), []),
      state(3, null, []),
    ];
    expect(experimentStatistics(states, 'accuracy', now)).toEqual({
      total_runs: 4,
      completed_runs: 1,
      running_runs: 1,
      failed_runs: 0,
      best_metric: null,
      best_run: null,
      total_cost: 3.5,
      // 1 h for the completed job, 3 h (08:00 to now) for the running one.
      total_training_time: 3600 + 3 * 3600,
      total_gpu_hours: 1.5,
    });
    expect(experimentInsights(states, 'accuracy', { metrics: { accuracy: 0.9 } })).toEqual([]);
  });
});

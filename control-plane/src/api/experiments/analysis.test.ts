import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedJob } from '../../testing/experiment-jobs.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

// Three completed runs with known histories (expected tests from SciPy 1.17, ttest_ind(equal_var=False)
// over the last 5 reports), one failed and one running.
const LOSS = {
  a: [1.2, 0.9, 0.7, 0.6, 0.52, 0.5, 0.49, 0.48, 0.47, 0.46],
  b: [1.1, 0.8, 0.6, 0.45, 0.38, 0.35, 0.33, 0.31, 0.3, 0.29],
  c: [1.3, 1.0, 0.8, 0.7, 0.66, 0.62, 0.6, 0.59, 0.58, 0.57],
};
const ACCURACY = {
  a: [0.4, 0.5, 0.6, 0.65, 0.7, 0.72, 0.73, 0.74, 0.75, 0.76],
  b: [0.45, 0.55, 0.65, 0.7, 0.75, 0.78, 0.8, 0.81, 0.82, 0.83],
  c: [0.35, 0.45, 0.5, 0.6, 0.65, 0.7, 0.78, 0.84, 0.86, 0.88],
};
const reports = (key: 'a' | 'b' | 'c') => LOSS[key].map((loss, i) => ({ loss, accuracy: ACCURACY[key][i]! }));

describe('experiments API: statistics, insights, compare, export', () => {
  let t: TestApp;
  let clock: ManualClock;
  let experimentId: string;
  const runs: Record<string, string> = {};

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-11-27T10:00:00Z'));
    t = await createTestApp({ clock });
    const created = await call('POST', '/v2/training/experiments', {
      name: 'lr sweep',
      description: 'three learning rates',
      baseline: { type: 'model', name: 'v1', metrics: { loss: 0.5 } },
      metadata: { team: 'nlp' },
    });
    experimentId = created.json().id;
    const jobs = {
      a: await seedJob(t, {
        name: 'lr-1e-3',
        status: 'completed',
        parameters: { learning_rate: 0.001, batch_size: 32, optimizer: 'adamw' },
        reports: reports('a'),
        hours: 2,
        hourlyRate: 3,
      }),
      b: await seedJob(t, {
        name: 'lr-1e-2',
        status: 'completed',
        parameters: { learning_rate: 0.01, batch_size: 32, optimizer: 'adamw' },
        reports: reports('b'),
        hours: 1,
        hourlyRate: 3,
      }),
      c: await seedJob(t, {
        name: 'lr-1e-1',
        status: 'completed',
        parameters: { learning_rate: 0.1, batch_size: 32, optimizer: '=cmd' },
        reports: reports('c'),
        hours: 4,
        hourlyRate: 3,
      }),
      d: await seedJob(t, {
        name: 'diverged',
        status: 'failed',
        parameters: { learning_rate: 1 },
        reports: [{ loss: 2 }, { loss: 2.5 }],
        hours: 0.5,
        hourlyRate: 3,
      }),
      e: await seedJob(t, {
        name: 'still going',
        status: 'running',
        parameters: { learning_rate: 0.005 },
        reports: [{ loss: 1 }, { loss: 0.9 }],
        hourlyRate: 3,
      }),
    };
    for (const [key, jobId] of Object.entries(jobs)) {
      const res = await call('POST', `/v2/training/experiments/${experimentId}/runs`, {
        trainingJobId: jobId,
        ...(key === 'a' ? { notes: 'first, "quoted", note', tags: ['x', 'y'] } : {}),
      });
      expect(res.statusCode, res.body).toBe(201);
      runs[key] = res.json().id;
    }
  });
  afterAll(async () => {
    await t.close();
  });

  function call(method: 'GET' | 'POST', url: string, payload?: unknown) {
    return t.app.inject({
      method,
      url,
      headers: { authorization: `Bearer ${t.ownerKey}` },
      ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
    });
  }

  it('computes the statistics from the runs and their jobs', async () => {
    const experiment = (await call('GET', `/v2/training/experiments/${experimentId}`)).json();
    expect(experiment.statistics).toEqual({
      total_runs: 5,
      completed_runs: 3,
      running_runs: 1,
      failed_runs: 1,
      best_metric: 0.29,
      best_run: { id: runs['b'], metric: 'loss', value: 0.29 },
      // 2 h + 1 h + 4 h + 0.5 h closed, 2 h open (08:00 to 10:00), all at $3/h on one GPU.
      total_cost: 28.5,
      total_training_time: 7200 + 3600 + 14400 + 1800 + 7200,
      total_gpu_hours: 9.5,
    });
    expect(experiment.runs.map((r: { status: string }) => r.status)).toEqual([
      'completed',
      'completed',
      'completed',
      'failed',
      'running',
    ]);
  });

  it('derives insights only from computed comparisons, each with its rule', async () => {
    const { insights } = (await call('GET', `/v2/training/experiments/${experimentId}`)).json();
    expect(insights.map((i: { type: string }) => i.type)).toEqual([
      'best_run',
      'baseline_comparison',
      'failures',
    ]);
    const [best, baseline, failures] = insights;
    expect(best).toMatchObject({
      evidence: {
        metric: 'loss',
        direction: 'minimize',
        bestRun: { id: runs['b'], value: 0.29 },
        runnerUp: { id: runs['a'], value: 0.46 },
        test: { name: 'welch_t' },
      },
      savings: null,
      rule: expect.stringContaining('Welch'),
    });
    expect(best.evidence.test.t).toBeCloseTo(-12.728868621583857, 9);
    expect(best.evidence.test.df).toBeCloseTo(6.90799699172725, 9);
    expect(best.evidence.test.pValue).toBeCloseTo(4.766655994956306e-6, 12);
    expect(best.confidence).toBeCloseTo(1 - 4.766655994956306e-6, 6);
    expect(baseline).toMatchObject({ confidence: null, evidence: { baseline: 0.5, bestRun: runs['b'] } });
    expect(baseline.evidence.improvement).toBeCloseTo(0.42, 12);
    expect(baseline.message).toContain('42% better');
    expect(failures).toMatchObject({ confidence: 1, evidence: { failedRuns: [runs['d']], totalRuns: 5 } });
  });

  it('compares completed runs: rankings, Welch tests, correlations, Pareto frontier, recommendations', async () => {
    const res = await call('POST', `/v2/training/experiments/${experimentId}/compare`, {
      metrics: ['loss', 'accuracy'],
    });
    expect(res.statusCode, res.body).toBe(200);
    const result = res.json();
    expect(result.metrics).toEqual([
      { name: 'loss', direction: 'minimize' },
      { name: 'accuracy', direction: 'maximize' },
    ]);
    expect(result.excludedRuns).toEqual([
      { runId: runs['d'], status: 'failed', reason: expect.any(String) },
      { runId: runs['e'], status: 'running', reason: expect.any(String) },
    ]);
    expect(result.rankings).toEqual([
      {
        metric: 'loss',
        direction: 'minimize',
        ranking: [
          { rank: 1, runId: runs['b'], runName: 'lr-1e-2', value: 0.29 },
          { rank: 2, runId: runs['a'], runName: 'lr-1e-3', value: 0.46 },
          { rank: 3, runId: runs['c'], runName: 'lr-1e-1', value: 0.57 },
        ],
        missing: [],
      },
      {
        metric: 'accuracy',
        direction: 'maximize',
        ranking: [
          { rank: 1, runId: runs['c'], runName: 'lr-1e-1', value: 0.88 },
          { rank: 2, runId: runs['b'], runName: 'lr-1e-2', value: 0.83 },
          { rank: 3, runId: runs['a'], runName: 'lr-1e-3', value: 0.76 },
        ],
        missing: [],
      },
    ]);

    const tests = result.statistical_analysis.tests as Record<string, number | string | boolean>[];
    const find = (metric: string, runB: string) =>
      tests.find((x) => x['metric'] === metric && x['runB'] === runB)!;
    const expected = [
      ['loss', runs['a'], -12.728868621583857, 6.90799699172725, 4.766655994956306e-6, 4.766655994956306e-6],
      [
        'loss',
        runs['c'],
        -20.02314450303631,
        7.62729769702092,
        7.185586993495982e-8,
        2 * 7.185586993495982e-8,
      ],
      [
        'accuracy',
        runs['b'],
        0.11857383334574724,
        4.5537126441227445,
        0.9106634262664307,
        0.9106634262664307,
      ],
      [
        'accuracy',
        runs['a'],
        2.1571974637631253,
        4.3751114934302615,
        0.09131663920701558,
        2 * 0.09131663920701558,
      ],
    ] as const;
    expect(tests).toHaveLength(4);
    for (const [metric, runB, tValue, df, p, holm] of expected) {
      const test = find(metric, runB!);
      expect(test).toMatchObject({ test: 'welch_t', nA: 5, nB: 5 });
      expect(test['t'] as number).toBeCloseTo(tValue, 9);
      expect(test['df'] as number).toBeCloseTo(df, 9);
      expect((test['pValue'] as number) / p).toBeCloseTo(1, 7);
      expect((test['pValueHolm'] as number) / holm).toBeCloseTo(1, 7);
      expect(test['significant']).toBe(holm < 0.05);
    }
    expect(result.statistical_analysis.skipped).toEqual([]);

    // batch_size is the same everywhere and optimizer is text: only learning_rate correlates.
    expect(
      result.correlations.map((c: { parameter: string; metric: string }) => `${c.parameter}/${c.metric}`),
    ).toEqual(['learning_rate/loss', 'learning_rate/accuracy']);
    const lrLoss = result.correlations[0];
    expect(lrLoss.n).toBe(3);
    expect(lrLoss.pearson.r).toBeCloseTo(0.7458518542282992, 12);
    expect(lrLoss.pearson.pValue).toBeCloseTo(0.46408534423566394, 10);
    // Spearman's p is exact for so few runs: every ordering of 3 reaches |ρ| ≥ 0.5.
    expect(lrLoss.spearman).toEqual({ rho: 0.5, pValue: 1, method: 'exact' });
    // Perfect order of 3 runs: p = 2/3! = 1/3, too weak for a recommendation.
    expect(result.correlations[1].spearman).toEqual({ rho: 1, pValue: 1 / 3, method: 'exact' });

    // a is dominated by b (higher loss, lower accuracy); b and c trade loss for accuracy.
    expect(result.pareto_frontier).toEqual([
      {
        runId: runs['b'],
        reason: expect.stringContaining('best loss'),
        values: { loss: 0.29, accuracy: 0.83 },
      },
      {
        runId: runs['c'],
        reason: expect.stringContaining('best accuracy'),
        values: { loss: 0.57, accuracy: 0.88 },
      },
    ]);
    expect(result.recommendations).toEqual([
      expect.objectContaining({ type: 'significant_winner', runId: runs['b'], rule: expect.any(String) }),
      expect.objectContaining({ type: 'inconclusive', runId: runs['c'] }),
    ]);
    expect(result.runs).toHaveLength(5);
  });

  it('compares a chosen subset, with chosen analyses and directions', async () => {
    const res = await call('POST', `/v2/training/experiments/${experimentId}/compare`, {
      runs: [runs['a'], runs['c']],
      metrics: ['loss'],
      analysis: { statistical_tests: false, correlation_analysis: false },
      directions: { loss: 'maximize' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const result = res.json();
    expect(result.rankings[0].ranking.map((r: { runId: string }) => r.runId)).toEqual([runs['c'], runs['a']]);
    expect(result.statistical_analysis).toBeNull();
    expect(result.correlations).toBeNull();
    expect(result.pareto_frontier).toEqual([expect.objectContaining({ runId: runs['c'] })]);
    // Default metrics: the primary metric, then those every completed run reports.
    const defaults = (await call('POST', `/v2/training/experiments/${experimentId}/compare`, {})).json();
    expect(defaults.metrics.map((m: { name: string }) => m.name)).toEqual(['loss', 'accuracy']);
  });

  it('refuses comparisons without 2 completed runs and runs of other experiments', async () => {
    const few = await call('POST', `/v2/training/experiments/${experimentId}/compare`, {
      runs: [runs['a'], runs['d'], runs['e']],
    });
    expect(few.statusCode).toBe(422);
    expect(few.json()).toEqual({
      error: 'INSUFFICIENT_RUNS',
      message: expect.any(String),
      code: 422,
      details: {
        completedRuns: 1,
        minimumRequired: 2,
        runs: [
          { id: runs['a'], status: 'completed' },
          { id: runs['d'], status: 'failed' },
          { id: runs['e'], status: 'running' },
        ],
      },
    });
    const stranger = await call('POST', `/v2/training/experiments/${experimentId}/compare`, {
      runs: [runs['a'], 'run_notinthisexperiment'],
    });
    expect(stranger.statusCode).toBe(404);
    expect(stranger.json()).toMatchObject({
      error: 'RUN_NOT_FOUND',
      details: { runId: 'run_notinthisexperiment', experimentId },
    });
    const bad = await call('POST', `/v2/training/experiments/${experimentId}/compare`, {
      analysis: { anova: true },
    });
    expect(bad.statusCode).toBe(400);
  });

  it('exports the runs as CSV, with the sections asked for', async () => {
    const res = await call('POST', `/v2/training/experiments/${experimentId}/export`, {
      format: 'csv',
      include: ['parameters', 'metadata'],
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(res.headers['content-disposition']).toBe(`attachment; filename="${experimentId}.csv"`);
    const lines = res.body.split('\r\n');
    expect(lines).toHaveLength(7);
    expect(lines[6]).toBe('');
    expect(lines[0]).toBe(
      'run_id,run_name,training_job_id,status,created_at,completed_at,param.batch_size,param.learning_rate,' +
        'param.optimizer,tags,notes,cost_usd,gpu_hours,training_time_seconds,copied_from_run_id,' +
        'experiment_id,experiment_name,experiment_metadata',
    );
    const experiment = (await call('GET', `/v2/training/experiments/${experimentId}`)).json();
    const a = experiment.runs[0];
    expect(lines[1]).toBe(
      `${runs['a']},lr-1e-3,${a.trainingJobId},completed,${a.createdAt},2026-11-27T10:00:00.000Z,32,0.001,adamw,` +
        `x;y,"first, ""quoted"", note",6,2,7200,,${experimentId},lr sweep,"{""team"":""nlp""}"`,
    );
    // A text cell that a spreadsheet would run as a formula is defused.
    expect(lines[3]).toContain(",32,0.1,'=cmd,");
    // The failed run has no batch_size: an empty cell.
    expect(lines[4]).toContain(',failed,2026-11-27T10:00:00.000Z,2026-11-27T08:30:00.000Z,,1,,');

    const metrics = await call('POST', `/v2/training/experiments/${experimentId}/export`, {
      include: ['metrics'],
    });
    const header = metrics.body.split('\r\n')[0]!;
    expect(header).toBe(
      'run_id,run_name,training_job_id,status,created_at,completed_at,metric.accuracy.current,' +
        'metric.accuracy.best,metric.accuracy.final,metric.loss.current,metric.loss.best,metric.loss.final',
    );
    expect(metrics.body.split('\r\n')[2]).toContain(',0.83,0.83,0.83,0.29,0.29,0.29');
    expect(metrics.body.split('\r\n')[5]).toMatch(/,running,[^,]+,,,,,0\.9,0\.9,$/);
  });

  it('refuses export destinations it cannot honour rather than pretending', async () => {
    const res = await call('POST', `/v2/training/experiments/${experimentId}/export`, {
      destination: { type: 's3', bucket: 'results', path: 'exp.csv' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: 'DESTINATION_NOT_CONFIGURED',
      message: expect.stringContaining('s3'),
      code: 400,
      details: { type: 's3', supportedTypes: ['download'] },
    });
    expect(
      (await call('POST', `/v2/training/experiments/${experimentId}/export`, { format: 'parquet' }))
        .statusCode,
    ).toBe(400);
    const download = await call('POST', `/v2/training/experiments/${experimentId}/export`, {
      destination: { type: 'download' },
    });
    expect(download.statusCode).toBe(200);
  });
});

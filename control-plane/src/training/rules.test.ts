import { describe, expect, it } from 'vitest';
import { jobInputOf, withParameters } from './config.ts';
import { parseReport } from './contract.ts';
import type { PlacedWorker } from './launcher.ts';
import { couldEverFit, planGang } from './placement.ts';
import { nextMetrics } from './reports.ts';
import { verdict, workerState } from './supervisor.ts';

const dataset = 'ds_abc';

describe('job configuration', () => {
  it('flattens both forms into snake_case parameters', () => {
    const full = jobInputOf({
      name: ' a ',
      modelType: 'llm',
      datasetId: dataset,
      config: {
        training: { learning_rate: 0.001, epochs: 3 },
        optimization: { max_grad_norm: 1 },
        parameters: { warmupRatio: 0.1 },
      },
      gpuType: 'h100',
      maxWorkers: 2,
    });
    expect(full).toMatchObject({
      name: 'a',
      gpuType: 'H100',
      workers: 2,
      gpusPerWorker: 1,
      parameters: { learning_rate: 0.001, epochs: 3, max_grad_norm: 1, warmup_ratio: 0.1 },
      form: 'full',
    });
    const short = jobInputOf({
      name: 's',
      hyperparameters: { learningRate: 0.0002, batchSize: 8, epochs: 1, optimizer: 'adamw' },
      datasetConfig: { datasetId: dataset },
      infrastructure: { gpuType: 'A100', gpuCount: 2 },
      modelConfig: { modelType: 'language_model', customCode: 'print(1)' },
    });
    expect(short).toMatchObject({
      modelType: 'llm',
      gpuType: 'A100',
      gpusPerWorker: 2,
      customCode: 'print(1)',
      parameters: { learning_rate: 0.0002, batch_size: 8, epochs: 1, optimizer: 'adamw' },
      form: 'short',
    });
  });

  it('refuses learning rates outside 1e-6..1e-1 and bad counts with CONFIGURATION_ERROR', () => {
    const body = (lr: unknown, extra: Record<string, unknown> = {}) => ({
      name: 'x',
      modelType: 'llm',
      datasetId: dataset,
      config: { training: { learning_rate: lr, ...extra } },
    });
    for (const lr of [1e-7, 0.2, '0.01']) {
      expect(() => jobInputOf(body(lr))).toThrow(expect.objectContaining({ code: 'CONFIGURATION_ERROR' }));
    }
    expect(() => jobInputOf(body(1e-6))).not.toThrow();
    expect(() => jobInputOf(body(0.1))).not.toThrow();
    expect(() => jobInputOf(body(0.01, { epochs: 0 }))).toThrow(
      expect.objectContaining({
        details: { field: 'config.training.epochs', reason: 'must be an integer >= 1' },
      }),
    );
    expect(() => jobInputOf({ ...body(0.01), gpuType: 'b200' })).toThrow(
      expect.objectContaining({ code: 'CONFIGURATION_ERROR' }),
    );
    const base = jobInputOf(body(0.01));
    expect(withParameters(base, { learningRate: 0.02 }).config['training']).toMatchObject({
      learning_rate: 0.02,
    });
    expect(() => withParameters(base, { learning_rate: 2 })).toThrow(
      expect.objectContaining({ code: 'CONFIGURATION_ERROR' }),
    );
  });
});

describe('trainer reports', () => {
  it('parses metric and checkpoint lines and ignores the rest', () => {
    expect(
      parseReport(
        'ANVIL_REPORT {"type":"metrics","step":3,"epoch":1,"loss":0.5,"learning_rate":0.001,"total_steps":9,"name":"x"}',
      ),
    ).toEqual({
      type: 'metrics',
      step: 3,
      epoch: 1,
      totalSteps: 9,
      totalEpochs: null,
      values: { loss: 0.5, learning_rate: 0.001 },
    });
    expect(
      parseReport('ANVIL_REPORT {"type":"checkpoint","path":"epoch-1/model","loss":0.4,"size_bytes":10}'),
    ).toMatchObject({
      type: 'checkpoint',
      path: 'epoch-1/model',
      sizeBytes: 10,
    });
    for (const line of [
      'hello',
      'ANVIL_REPORT not json',
      'ANVIL_REPORT {"type":"checkpoint","path":"../../etc"}',
      'ANVIL_REPORT {"type":"checkpoint","path":"/abs"}',
      'ANVIL_REPORT {"type":"other"}',
      'ANVIL_REPORT [1]',
    ]) {
      expect(parseReport(line)).toBeNull();
    }
  });

  it('keeps the latest values and the lowest loss', () => {
    let m = nextMetrics({}, { loss: 0.5, learning_rate: 0.01 });
    m = nextMetrics(m, { loss: 0.7, throughput: 12 });
    expect(m).toEqual({ currentLoss: 0.7, bestLoss: 0.5, learningRate: 0.01, throughput: 12 });
  });
});

describe('gang placement', () => {
  const hosts = [
    { hostId: 'a', free: [0, 1, 2, 3] },
    { hostId: 'b', free: [1] },
    { hostId: 'c', free: [0, 1] },
  ];

  it('puts every worker on the best-fitting single host when one can take them all', () => {
    expect(planGang(hosts, { workers: 2, gpusPerWorker: 1, rank0Host: null })).toEqual([
      { rank: 0, hostId: 'c', gpuIndices: [0] },
      { rank: 1, hostId: 'c', gpuIndices: [1] },
    ]);
    expect(planGang(hosts, { workers: 1, gpusPerWorker: 1, rank0Host: null })?.[0]?.hostId).toBe('b');
  });

  it('spreads over hosts with the most room first, or places nothing', () => {
    expect(planGang(hosts, { workers: 3, gpusPerWorker: 2, rank0Host: null })).toEqual([
      { rank: 0, hostId: 'a', gpuIndices: [0, 1] },
      { rank: 1, hostId: 'a', gpuIndices: [2, 3] },
      { rank: 2, hostId: 'c', gpuIndices: [0, 1] },
    ]);
    expect(planGang(hosts, { workers: 4, gpusPerWorker: 2, rank0Host: null })).toBeNull();
  });

  it('keeps rank 0 on its checkpoint host', () => {
    expect(planGang(hosts, { workers: 2, gpusPerWorker: 1, rank0Host: 'b' })).toEqual([
      { rank: 0, hostId: 'b', gpuIndices: [1] },
      { rank: 1, hostId: 'a', gpuIndices: [0] },
    ]);
    expect(
      planGang([{ hostId: 'b', free: [] }, ...hosts.slice(0, 1)], {
        workers: 1,
        gpusPerWorker: 1,
        rank0Host: 'b',
      }),
    ).toBeNull();
  });

  it('tells busy from impossible', () => {
    const totals = [
      { hostId: 'a', total: 2 },
      { hostId: 'b', total: 1 },
    ];
    expect(couldEverFit(totals, { workers: 3, gpusPerWorker: 1, rank0Host: null })).toBe(true);
    expect(couldEverFit(totals, { workers: 2, gpusPerWorker: 2, rank0Host: null })).toBe(false);
    expect(couldEverFit(totals, { workers: 1, gpusPerWorker: 1, rank0Host: 'gone' })).toBe(false);
  });
});

describe('job state machine', () => {
  const worker = (rank: number, stale: string | null = null): PlacedWorker => ({
    rank,
    workloadId: `w${rank}`,
    hostId: 'h',
    gpus: [],
    staleContainerId: stale,
  });
  const row = (
    phase: string,
    actual: Record<string, unknown> | null = null,
    extra: Record<string, unknown> = {},
  ) => ({ phase, actualStatus: actual, hostUnreachable: false, desired: 'running', ...extra }) as never;

  it("reads worker states, ignoring a previous attempt's container", () => {
    expect(workerState(row('running'), worker(0))).toEqual({ kind: 'running' });
    expect(workerState(row('exited', { exitCode: 3 }), worker(0))).toEqual({ kind: 'exited', exitCode: 3 });
    expect(workerState(row('exited', { exitCode: 0, containerId: 'old' }), worker(0, 'old'))).toEqual({
      kind: 'starting',
    });
    expect(workerState(row('running', null, { hostUnreachable: true }), worker(0))).toEqual({
      kind: 'unreachable',
    });
    expect(workerState(undefined, worker(0))).toEqual({ kind: 'gone' });
  });

  it('moves pending → running only when every worker runs, and ends on exits', () => {
    const s = (rank: number, state: ReturnType<typeof workerState>) => ({ rank, state });
    expect(verdict('pending', [s(0, { kind: 'running' }), s(1, { kind: 'starting' })], false)).toEqual({
      kind: 'wait',
    });
    expect(verdict('pending', [s(0, { kind: 'running' }), s(1, { kind: 'running' })], false)).toEqual({
      kind: 'running',
    });
    expect(
      verdict('running', [s(0, { kind: 'exited', exitCode: 0 }), s(1, { kind: 'running' })], false),
    ).toEqual({
      kind: 'completed',
    });
    expect(
      verdict('running', [s(0, { kind: 'running' }), s(1, { kind: 'exited', exitCode: 1 })], false),
    ).toMatchObject({
      kind: 'failed',
      exitCode: 1,
    });
    expect(verdict('running', [s(0, { kind: 'unreachable' })], false)).toMatchObject({ kind: 'failed' });
    expect(verdict('pending', [s(0, { kind: 'failed', error: 'no image' })], false)).toMatchObject({
      kind: 'failed',
      reason: 'worker 0 could not start: no image',
    });
  });

  it('stops once no worker runs, or after the grace period', () => {
    const running = [{ rank: 0, state: { kind: 'running' as const } }];
    expect(verdict('stopping', running, false)).toEqual({ kind: 'wait' });
    expect(verdict('stopping', running, true)).toMatchObject({ kind: 'stopped' });
    expect(verdict('stopping', [{ rank: 0, state: { kind: 'exited', exitCode: 137 } }], false)).toMatchObject(
      {
        kind: 'stopped',
      },
    );
  });
});

import { describe, expect, it } from 'vitest';
import { bestOf, convergence, type TrialFacts } from './analysis.ts';
import { shouldStopEarly } from './driver.ts';
import {
  bayesianPoint,
  decode,
  encode,
  gridPoint,
  hyperbandBrackets,
  hyperbandTrialCount,
  randomPoint,
  rng,
  type TrialPoint,
  tpePoint,
} from './samplers.ts';
import { applyConditions, checkAlgorithm, gridSize, parseSearchSpace } from './search-space.ts';
import { shortFormSpace } from './service.ts';

describe('search spaces', () => {
  it('normalises names and checks every parameter', () => {
    const space = parseSearchSpace({
      learningRate: { type: 'log_uniform', min: 1e-5, max: 1e-2 },
      batch_size: { type: 'choice', values: [8, 16] },
      momentum: { type: 'uniform', min: 0, max: 1, condition: "optimizer == 'sgd'" },
      optimizer: { type: 'choice', values: ['sgd', 'adam'] },
    });
    expect(space.map((p) => p.name)).toEqual(['learning_rate', 'batch_size', 'momentum', 'optimizer']);
    const bad = (raw: Record<string, unknown>) => {
      try {
        parseSearchSpace(raw);
      } catch (error) {
        return (error as { code: string; details: { parameter: string } }).details.parameter;
      }
      return null;
    };
    expect(bad({})).toBe('(none)');
    expect(bad({ x: { type: 'normal', min: 0, max: 1 } })).toBe('x');
    expect(bad({ x: { type: 'uniform', min: 1, max: 1 } })).toBe('x');
    expect(bad({ x: { type: 'log_uniform', min: 0, max: 1 } })).toBe('x');
    expect(bad({ x: { type: 'int_uniform', min: 0.5, max: 3 } })).toBe('x');
    expect(bad({ x: { type: 'choice', values: [] } })).toBe('x');
    expect(bad({ learning_rate: { type: 'uniform', min: 0, max: 0.5 } })).toBe('learning_rate');
    expect(bad({ x: { type: 'uniform', min: 0, max: 1, condition: 'y >> 2' } })).toBe('x');
    expect(bad({ x: { type: 'uniform', min: 0, max: 1, condition: 'nope == 2' } })).toBe('x');
  });

  it('refuses grid over continuous parameters, and gates parameters by their condition', () => {
    const space = parseSearchSpace({
      optimizer: { type: 'choice', values: ['sgd', 'adam'] },
      momentum: { type: 'choice', values: [0.9, 0.99], condition: 'optimizer == sgd' },
      layers: { type: 'int_uniform', min: 1, max: 3 },
    });
    expect(() => checkAlgorithm('grid', space)).not.toThrow();
    expect(gridSize(space)).toBe(12);
    expect(() =>
      checkAlgorithm('grid', parseSearchSpace({ lr: { type: 'uniform', min: 0, max: 1 } })),
    ).toThrow(
      expect.objectContaining({
        code: 'ALGORITHM_NOT_SUPPORTED',
        details: { algorithm: 'grid', unsupportedParameterTypes: ['uniform'] },
      }),
    );
    expect(applyConditions(space, { optimizer: 'adam', momentum: 0.9, layers: 2 })).toEqual({
      optimizer: 'adam',
      layers: 2,
    });
    expect(applyConditions(space, { optimizer: 'sgd', momentum: 0.9, layers: 2 })).toEqual({
      optimizer: 'sgd',
      momentum: 0.9,
      layers: 2,
    });
  });

  it('reads the short form', () => {
    expect(
      shortFormSpace({
        learningRate: { min: 0.001, max: 0.01 },
        batchSize: [8, 16],
        epochs: { min: 1, max: 3 },
      }),
    ).toEqual({
      learning_rate: { type: 'log_uniform', min: 0.001, max: 0.01 },
      batch_size: { type: 'choice', values: [8, 16] },
      epochs: { type: 'int_uniform', min: 1, max: 3 },
    });
  });
});

describe('samplers', () => {
  const space = parseSearchSpace({
    x: { type: 'uniform', min: -2, max: 2 },
    lr: { type: 'log_uniform', min: 1e-4, max: 1e-1 },
    n: { type: 'int_uniform', min: 1, max: 5 },
    opt: { type: 'choice', values: ['a', 'b', 'c'] },
  });

  it('encodes and decodes within bounds, and walks the grid in order', () => {
    for (const spec of space) {
      for (const u of [0, 0.3, 1]) expect(encode(spec, decode(spec, u))).toBeGreaterThanOrEqual(0);
    }
    const random = rng(1);
    for (let i = 0; i < 200; i++) {
      const p = randomPoint(space, random);
      expect(p['x']).toBeGreaterThanOrEqual(-2);
      expect(p['lr']).toBeLessThanOrEqual(0.1);
      expect(Number.isInteger(p['n'])).toBe(true);
      expect(['a', 'b', 'c']).toContain(p['opt']);
    }
    const grid = parseSearchSpace({
      a: { type: 'choice', values: [1, 2] },
      b: { type: 'int_uniform', min: 0, max: 2 },
    });
    expect([0, 1, 2, 3, 5, 6].map((i) => gridPoint(grid, i))).toEqual([
      { a: 1, b: 0 },
      { a: 1, b: 1 },
      { a: 1, b: 2 },
      { a: 2, b: 0 },
      { a: 2, b: 2 },
      null,
    ]);
  });

  // f(x) = (x - 0.7)^2 on [-2, 2]: model-based samplers, fed their own proposals, end near 0.7.
  const optimise = (
    sample: (s: typeof space1, t: TrialPoint[], r: () => number) => Record<string, unknown>,
  ) => {
    const trials: TrialPoint[] = [];
    for (let i = 0; i < 30; i++) {
      const p = sample(space1, trials, rng(100 + i)) as { x: number };
      trials.push({ params: p, score: (p.x - 0.7) ** 2, active: false });
    }
    return Math.min(...trials.map((t) => t.score!));
  };
  const space1 = parseSearchSpace({ x: { type: 'uniform', min: -2, max: 2 } });

  it('bayesian and tpe beat random search on a smooth objective', () => {
    const random = optimise((s, _t, r) => randomPoint(s, r));
    const gp = optimise(bayesianPoint);
    const tpe = optimise(tpePoint);
    expect(gp).toBeLessThan(1e-3);
    expect(tpe).toBeLessThan(1e-2);
    expect(gp).toBeLessThanOrEqual(random);
  });

  it('lays out hyperband brackets', () => {
    const brackets = hyperbandBrackets({ maxEpochs: 9, reductionFactor: 3, minEpochs: 1 });
    expect(brackets).toEqual([
      [
        { configs: 9, epochs: 1 },
        { configs: 3, epochs: 3 },
        { configs: 1, epochs: 9 },
      ],
      [
        { configs: 5, epochs: 3 },
        { configs: 1, epochs: 9 },
      ],
      [{ configs: 3, epochs: 9 }],
    ]);
    expect(hyperbandTrialCount({ maxEpochs: 9, reductionFactor: 3, minEpochs: 1 })).toBe(22);
  });
});

describe('tuning analysis', () => {
  const trial = (
    number: number,
    value: number | null,
    outcome: TrialFacts['outcome'] = 'completed',
  ): TrialFacts => ({
    id: `job_${number}`,
    number,
    outcome,
    status: outcome,
    parameters: {},
    metrics: {},
    value,
    duration: 10,
    cost: 1,
    finishedAt: new Date(number * 1000),
    modelId: null,
  });

  it('finds the best trial and judges convergence', () => {
    const trials = [
      trial(1, 0.9),
      trial(2, 0.5),
      trial(3, 0.1, 'failed'),
      trial(4, 0.3),
      trial(5, 0.3),
      trial(6, 0.3),
      trial(7, 0.3),
    ];
    expect(bestOf(trials, 'minimize')?.id).toBe('job_4');
    expect(bestOf(trials, 'maximize')?.id).toBe('job_1');
    const c = convergence(trials, 'minimize');
    expect(c).toMatchObject({ converged: true, convergenceEpoch: 3, remainingImprovement: 0 });
    expect(convergence(trials.slice(0, 4), 'minimize').converged).toBe(false);
  });

  it('stops a trial early when its metric stalls for `patience` reports', () => {
    expect(shouldStopEarly([1, 0.8, 0.79, 0.79, 0.8], 3, 0.05)).toBe(true);
    expect(shouldStopEarly([1, 0.8, 0.7, 0.6], 3, 0.05)).toBe(false);
    expect(shouldStopEarly([1, 0.9], 3, 0)).toBe(false);
  });
});

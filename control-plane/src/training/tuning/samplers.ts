import type { ParameterValue } from '../summary.ts';
import { type Algorithm, gridValues, type ParameterSpec, type SearchSpace } from './search-space.ts';

/**
 * The search algorithms, as pure functions of the search space, the trials so far and a seeded random
 * stream (so a restarted control plane proposes what it would have). Every sampler minimises `score`
 * (the objective's value, negated for maximize).
 */

export interface TrialPoint {
  params: Record<string, ParameterValue>;
  /** null while the trial runs, or when it reported no value for the metric. */
  score: number | null;
  active: boolean;
}

/** mulberry32: small, fast, good enough to spread samples; seeded per proposal. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A value → [0, 1] (log scales in log space; choices by index). */
export function encode(spec: ParameterSpec, value: ParameterValue): number {
  if (spec.type === 'choice') {
    const i = spec.values.indexOf(value);
    return spec.values.length === 1 ? 0.5 : Math.max(0, i) / (spec.values.length - 1);
  }
  const v = typeof value === 'number' ? value : spec.min;
  if (spec.type === 'log_uniform' || spec.type === 'int_log_uniform') {
    return (Math.log(v) - Math.log(spec.min)) / (Math.log(spec.max) - Math.log(spec.min));
  }
  return (v - spec.min) / (spec.max - spec.min);
}

/** [0, 1] → a value of the parameter (integers rounded, choices by nearest index). */
export function decode(spec: ParameterSpec, u: number): ParameterValue {
  const x = Math.min(1, Math.max(0, u));
  if (spec.type === 'choice')
    return spec.values[Math.min(spec.values.length - 1, Math.floor(x * spec.values.length))]!;
  let v =
    spec.type === 'log_uniform' || spec.type === 'int_log_uniform'
      ? Math.exp(Math.log(spec.min) + x * (Math.log(spec.max) - Math.log(spec.min)))
      : spec.min + x * (spec.max - spec.min);
  if (spec.type === 'int_uniform' || spec.type === 'int_log_uniform') v = Math.round(v);
  v = Math.min(spec.max, Math.max(spec.min, v));
  return spec.type === 'uniform' || spec.type === 'log_uniform' ? Number(v.toPrecision(6)) : v;
}

export function randomPoint(space: SearchSpace, random: () => number): Record<string, ParameterValue> {
  return Object.fromEntries(space.map((p) => [p.name, decode(p, random())]));
}

/** The grid's i-th point: mixed radix over the parameters in the order given (the last varies fastest). */
export function gridPoint(space: SearchSpace, index: number): Record<string, ParameterValue> | null {
  const axes = space.map((p) => gridValues(p) ?? []);
  const size = axes.reduce((n, a) => n * a.length, 1);
  if (index >= size) return null;
  const out: Record<string, ParameterValue> = {};
  let rest = index;
  for (let i = space.length - 1; i >= 0; i--) {
    const axis = axes[i]!;
    out[space[i]!.name] = axis[rest % axis.length]!;
    rest = Math.floor(rest / axis.length);
  }
  return out;
}

// ---- Gaussian process with expected improvement (bayesian)

const LENGTH_SCALE = 0.3;
const NOISE = 1e-4;

function kernel(a: number[], b: number[]): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d += (a[i]! - b[i]!) ** 2;
  return Math.exp(-d / (2 * LENGTH_SCALE * LENGTH_SCALE));
}

function cholesky(m: number[][]): number[][] {
  const n = m.length;
  const l = Array.from({ length: n }, () => new Array<number>(n).fill(0));
  for (let i = 0; i < n; i++) {
    for (let j = 0; j <= i; j++) {
      let sum = m[i]![j]!;
      for (let k = 0; k < j; k++) sum -= l[i]![k]! * l[j]![k]!;
      l[i]![j] = i === j ? Math.sqrt(Math.max(sum, 1e-12)) : sum / l[j]![j]!;
    }
  }
  return l;
}

function solveLower(l: number[][], b: number[]): number[] {
  const x = new Array<number>(b.length).fill(0);
  for (let i = 0; i < b.length; i++) {
    let s = b[i]!;
    for (let k = 0; k < i; k++) s -= l[i]![k]! * x[k]!;
    x[i] = s / l[i]![i]!;
  }
  return x;
}

function solveUpper(l: number[][], b: number[]): number[] {
  const n = b.length;
  const x = new Array<number>(n).fill(0);
  for (let i = n - 1; i >= 0; i--) {
    let s = b[i]!;
    for (let k = i + 1; k < n; k++) s -= l[k]![i]! * x[k]!;
    x[i] = s / l[i]![i]!;
  }
  return x;
}

const normPdf = (z: number) => Math.exp(-0.5 * z * z) / Math.sqrt(2 * Math.PI);
function normCdf(z: number): number {
  // Abramowitz-Stegun 7.1.26 through erf.
  const x = Math.abs(z) / Math.SQRT2;
  const t = 1 / (1 + 0.3275911 * x);
  const erf =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
      t *
      Math.exp(-x * x);
  return 0.5 * (1 + (z >= 0 ? erf : -erf));
}

/**
 * Fits a GP (RBF kernel, length scale 0.3 on the unit cube, scores standardised) to the finished trials, with
 * running trials counted at the mean score (the "constant liar", so concurrent proposals spread out), and
 * returns the candidate with the highest expected improvement among 256 random points and 64 around the best.
 */
export function bayesianPoint(
  space: SearchSpace,
  trials: TrialPoint[],
  random: () => number,
): Record<string, ParameterValue> {
  const done = trials.filter((t) => t.score !== null);
  if (done.length < Math.min(5, space.length + 2)) return randomPoint(space, random);
  const scores = done.map((t) => t.score!);
  const mean = scores.reduce((a, b) => a + b, 0) / scores.length;
  const sd = Math.sqrt(scores.reduce((a, b) => a + (b - mean) ** 2, 0) / scores.length) || 1;
  const observed = [
    ...done.map((t) => ({
      x: space.map((p) => encode(p, t.params[p.name] ?? null)),
      y: (t.score! - mean) / sd,
    })),
    ...trials
      .filter((t) => t.active)
      .map((t) => ({ x: space.map((p) => encode(p, t.params[p.name] ?? null)), y: 0 })),
  ];
  const k = observed.map((a, i) => observed.map((b, j) => kernel(a.x, b.x) + (i === j ? NOISE : 0)));
  const l = cholesky(k);
  const alpha = solveUpper(
    l,
    solveLower(
      l,
      observed.map((o) => o.y),
    ),
  );
  const best = Math.min(...observed.filter((_, i) => i < done.length).map((o) => o.y));
  const bestX = observed[observed.findIndex((o) => o.y === best)]!.x;
  let choice: number[] = bestX;
  let bestEi = -1;
  for (let c = 0; c < 320; c++) {
    const x =
      c < 256
        ? space.map(() => random())
        : bestX.map((v) => Math.min(1, Math.max(0, v + (random() - 0.5) * 0.2)));
    const ks = observed.map((o) => kernel(x, o.x));
    const mu = ks.reduce((s, v, i) => s + v * alpha[i]!, 0);
    const v = solveLower(l, ks);
    const variance = Math.max(1e-12, 1 + NOISE - v.reduce((s, a) => s + a * a, 0));
    const sigma = Math.sqrt(variance);
    const z = (best - mu - 0.01) / sigma;
    const ei = (best - mu - 0.01) * normCdf(z) + sigma * normPdf(z);
    if (ei > bestEi) {
      bestEi = ei;
      choice = x;
    }
  }
  return Object.fromEntries(space.map((p, i) => [p.name, decode(p, choice[i]!)]));
}

// ---- Tree-structured Parzen estimator (tpe)

const GAMMA = 0.25;

/**
 * TPE: the finished trials split into good (the best 25%) and bad; per parameter, a Parzen density l(x) over
 * the good and g(x) over the bad (Gaussian kernels of bandwidth 0.15 on the unit cube plus a uniform prior;
 * smoothed counts for choices). 48 candidates drawn from l; the one with the highest l(x)/g(x) wins.
 */
export function tpePoint(
  space: SearchSpace,
  trials: TrialPoint[],
  random: () => number,
): Record<string, ParameterValue> {
  const done = trials.filter((t) => t.score !== null).sort((a, b) => a.score! - b.score!);
  if (done.length < 5) return randomPoint(space, random);
  const nGood = Math.max(1, Math.ceil(GAMMA * done.length));
  const good = done.slice(0, nGood);
  const bad = done.slice(nGood);
  const h = 0.15;
  const density = (spec: ParameterSpec, set: TrialPoint[], u: number): number => {
    if (spec.type === 'choice') {
      const value = decode(spec, u);
      const count = set.filter((t) => t.params[spec.name] === value).length;
      return (count + 1) / (set.length + spec.values.length);
    }
    let sum = 1; // the uniform prior, as one more kernel
    for (const t of set) sum += normPdf((u - encode(spec, t.params[spec.name] ?? null)) / h) / h;
    return sum / (set.length + 1);
  };
  let best: number[] | null = null;
  let bestRatio = Number.NEGATIVE_INFINITY;
  for (let c = 0; c < 48; c++) {
    const anchor = good[Math.floor(random() * good.length)]!;
    const x = space.map((p) => {
      if (p.type === 'choice') return random() < 0.8 ? encode(p, anchor.params[p.name] ?? null) : random();
      const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
      return Math.min(1, Math.max(0, encode(p, anchor.params[p.name] ?? null) + z * h));
    });
    let ratio = 0;
    space.forEach((p, i) => {
      ratio += Math.log(density(p, good, x[i]!)) - Math.log(density(p, bad, x[i]!));
    });
    if (ratio > bestRatio) {
      bestRatio = ratio;
      best = x;
    }
  }
  return Object.fromEntries(space.map((p, i) => [p.name, decode(p, best![i]!)]));
}

// ---- Hyperband

export interface HyperbandConfig {
  maxEpochs: number;
  reductionFactor: number;
  minEpochs: number;
}

/** One rung of a bracket: how many configurations run, for how many epochs. */
export interface Rung {
  configs: number;
  epochs: number;
}

/**
 * Hyperband's brackets (Li et al. 2018): s_max = floor(log_eta(R / r_min)); bracket s starts
 * n = ceil((s_max + 1) / (s + 1) * eta^s) configurations at r = R * eta^-s epochs, and each rung keeps the best
 * floor(n_i / eta) for eta times the epochs (successive halving), up to R.
 */
export function hyperbandBrackets(config: HyperbandConfig): Rung[][] {
  const { maxEpochs: R, reductionFactor: eta, minEpochs } = config;
  const sMax = Math.max(0, Math.floor(Math.log(R / minEpochs) / Math.log(eta) + 1e-9));
  const brackets: Rung[][] = [];
  for (let s = sMax; s >= 0; s--) {
    const n = Math.ceil(((sMax + 1) / (s + 1)) * eta ** s);
    const rungs: Rung[] = [];
    for (let i = 0; i <= s; i++) {
      rungs.push({
        configs: Math.max(1, Math.floor(n * eta ** -i)),
        epochs: Math.max(minEpochs, Math.min(R, Math.round(R * eta ** (i - s)))),
      });
    }
    brackets.push(rungs);
  }
  return brackets;
}

export function hyperbandTrialCount(config: HyperbandConfig): number {
  return hyperbandBrackets(config).reduce((n, rungs) => n + rungs.reduce((m, r) => m + r.configs, 0), 0);
}

/** The proposal a sequential sampler makes next. */
export function sequentialPoint(
  algorithm: Exclude<Algorithm, 'grid' | 'hyperband'>,
  space: SearchSpace,
  trials: TrialPoint[],
  random: () => number,
): Record<string, ParameterValue> {
  if (algorithm === 'bayesian') return bayesianPoint(space, trials, random);
  if (algorithm === 'tpe') return tpePoint(space, trials, random);
  return randomPoint(space, random);
}

/**
 * The statistics experiments compare runs with, computed here from the samples: Welch's t-test,
 * Pearson and Spearman correlation with their p-values (Spearman's exact for small samples), Holm's
 * adjustment. Pure functions, no I/O.
 *
 * p-values come from Student's t distribution through the regularized incomplete beta function
 * (two-sided p = I_{df/(df+t²)}(df/2, 1/2)), evaluated by its continued fraction (Lentz's method) with
 * ln Γ from the Lanczos approximation: accurate to ~1e-10, checked against SciPy in statistics.test.ts.
 */

export function mean(values: readonly number[]): number {
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** Sample variance (divisor n − 1); NaN for fewer than 2 values. */
export function sampleVariance(values: readonly number[]): number {
  const n = values.length;
  if (n < 2) return Number.NaN;
  const m = mean(values);
  let sum = 0;
  for (const v of values) sum += (v - m) ** 2;
  return sum / (n - 1);
}

const LANCZOS = [
  0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
  12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
];

/** ln Γ(x) for x > 0 (Lanczos, g = 7). */
export function logGamma(x: number): number {
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  const z = x - 1;
  let a = LANCZOS[0]!;
  const t = z + 7.5;
  for (let i = 1; i < 9; i++) a += LANCZOS[i]! / (z + i);
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Continued fraction of the incomplete beta function (Numerical Recipes' betacf, Lentz's method). */
function betaContinuedFraction(x: number, a: number, b: number): number {
  const tiny = 1e-300;
  const qab = a + b;
  const qap = a + 1;
  const qam = a - 1;
  let c = 1;
  let d = 1 - (qab * x) / qap;
  if (Math.abs(d) < tiny) d = tiny;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 1000; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (qab + m) * x) / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-15) break;
  }
  return h;
}

/** Regularized incomplete beta I_x(a, b), 0 ≤ x ≤ 1. */
export function regularizedBeta(x: number, a: number, b: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  // The continued fraction converges quickly for x < (a+1)/(a+b+2); otherwise use the symmetry.
  if (x < (a + 1) / (a + b + 2)) return (front * betaContinuedFraction(x, a, b)) / a;
  return 1 - (front * betaContinuedFraction(1 - x, b, a)) / b;
}

/** Two-sided p-value of a t statistic with df degrees of freedom: P(|T| ≥ |t|). */
export function tTwoSidedP(t: number, df: number): number {
  if (Number.isNaN(t) || !(df > 0)) return Number.NaN;
  if (!Number.isFinite(t)) return 0;
  return Math.min(1, regularizedBeta(df / (df + t * t), df / 2, 0.5));
}

export interface WelchResult {
  t: number;
  df: number;
  pValue: number;
  meanA: number;
  meanB: number;
  varianceA: number;
  varianceB: number;
  nA: number;
  nB: number;
}

/**
 * Welch's unequal-variances t-test: t = (x̄a − x̄b) / √(sa²/na + sb²/nb), Welch–Satterthwaite
 * df = (sa²/na + sb²/nb)² / ((sa²/na)²/(na−1) + (sb²/nb)²/(nb−1)), two-sided p. Needs 2+ samples on each
 * side (else null). Both samples constant: t = 0 and p = 1 when the means are equal, t = ±∞ and p = 0
 * otherwise (df = na + nb − 2).
 */
export function welchTTest(a: readonly number[], b: readonly number[]): WelchResult | null {
  const nA = a.length;
  const nB = b.length;
  if (nA < 2 || nB < 2) return null;
  const meanA = mean(a);
  const meanB = mean(b);
  const varianceA = sampleVariance(a);
  const varianceB = sampleVariance(b);
  const qa = varianceA / nA;
  const qb = varianceB / nB;
  const se2 = qa + qb;
  const base = { meanA, meanB, varianceA, varianceB, nA, nB };
  if (se2 === 0) {
    const df = nA + nB - 2;
    if (meanA === meanB) return { ...base, t: 0, df, pValue: 1 };
    return { ...base, t: meanA > meanB ? Infinity : -Infinity, df, pValue: 0 };
  }
  const t = (meanA - meanB) / Math.sqrt(se2);
  const df = (se2 * se2) / ((qa * qa) / (nA - 1) + (qb * qb) / (nB - 1));
  return { ...base, t, df, pValue: tTwoSidedP(t, df) };
}

export interface CorrelationResult {
  /** The coefficient (Pearson's r, or Spearman's ρ). */
  coefficient: number;
  /** Two-sided p of H0 "no correlation": t = r·√((n−2)/(1−r²)), df = n − 2. */
  pValue: number;
  n: number;
}

/**
 * Pearson's r = Σ(x−x̄)(y−ȳ) / √(Σ(x−x̄)² · Σ(y−ȳ)²). Null for fewer than 3 pairs or a constant side
 * (r is undefined). |r| = 1 gives p = 0.
 */
export function pearson(x: readonly number[], y: readonly number[]): CorrelationResult | null {
  const n = x.length;
  if (n !== y.length || n < 3) return null;
  const mx = mean(x);
  const my = mean(y);
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    const dx = x[i]! - mx;
    const dy = y[i]! - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx === 0 || syy === 0) return null;
  const r = Math.max(-1, Math.min(1, sxy / Math.sqrt(sxx * syy)));
  const df = n - 2;
  const pValue = Math.abs(r) === 1 ? 0 : tTwoSidedP(r * Math.sqrt(df / (1 - r * r)), df);
  return { coefficient: r, pValue, n };
}

/** Ranks 1..n, ties sharing the average of the ranks they span. */
export function averageRanks(values: readonly number[]): number[] {
  const order = values.map((v, i) => [v, i] as const).sort((p, q) => p[0] - q[0]);
  const ranks = new Array<number>(values.length);
  let i = 0;
  while (i < order.length) {
    let j = i;
    while (j + 1 < order.length && order[j + 1]![0] === order[i]![0]) j++;
    const rank = (i + j) / 2 + 1;
    for (let k = i; k <= j; k++) ranks[order[k]![1]] = rank;
    i = j + 1;
  }
  return ranks;
}

/** Largest sample whose Spearman p-value is exact (n! orderings: 40,320 at 8). */
export const SPEARMAN_EXACT_MAX_N = 8;

export interface SpearmanResult extends CorrelationResult {
  /** exact: permutation distribution; t_approximation: Pearson's t on the ranks. */
  method: 'exact' | 't_approximation';
}

/**
 * Two-sided permutation p of Σ dx·dy over every ordering of the y values: the share of the n! pairings
 * whose |Σ dx_i·dy_π(i)| reaches the observed one (Heap's algorithm walks them).
 */
function exactPermutationP(dx: readonly number[], dy: readonly number[]): number {
  const n = dx.length;
  const ys = [...dy];
  const statistic = () => {
    let total = 0;
    for (let i = 0; i < n; i++) total += dx[i]! * ys[i]!;
    return Math.abs(total);
  };
  const observed = statistic();
  const tolerance = 1e-9 * Math.max(1, observed);
  let hits = 0;
  let count = 0;
  const visit = () => {
    count++;
    if (statistic() >= observed - tolerance) hits++;
  };
  const c = new Array<number>(n).fill(0);
  visit();
  let i = 1;
  while (i < n) {
    if (c[i]! < i) {
      const j = i % 2 === 0 ? 0 : c[i]!;
      [ys[j], ys[i]] = [ys[i]!, ys[j]!];
      visit();
      c[i]! += 1;
      i = 1;
    } else {
      c[i] = 0;
      i++;
    }
  }
  return hits / count;
}

/**
 * Spearman's ρ = Pearson's r of the average ranks. p-value: exact (the permutation distribution of ρ
 * over all n! pairings of the ranks) up to SPEARMAN_EXACT_MAX_N pairs; above, Pearson's t approximation
 * on the ranks (as SciPy's spearmanr does), where |ρ| = 1 gives 0.
 */
export function spearman(x: readonly number[], y: readonly number[]): SpearmanResult | null {
  if (x.length !== y.length) return null;
  const rx = averageRanks(x);
  const ry = averageRanks(y);
  const result = pearson(rx, ry);
  if (!result) return null;
  if (result.n > SPEARMAN_EXACT_MAX_N) return { ...result, method: 't_approximation' };
  const mx = mean(rx);
  const my = mean(ry);
  const pValue = exactPermutationP(
    rx.map((v) => v - mx),
    ry.map((v) => v - my),
  );
  return { ...result, pValue, method: 'exact' };
}

/**
 * Holm–Bonferroni adjusted p-values, in the input order: with p sorted ascending p(1) ≤ … ≤ p(m),
 * adj(i) = max over j ≤ i of min(1, (m − j + 1)·p(j)).
 */
export function holmAdjust(pValues: readonly number[]): number[] {
  const m = pValues.length;
  const order = pValues.map((p, i) => [p, i] as const).sort((a, b) => a[0] - b[0]);
  const adjusted = new Array<number>(m);
  let running = 0;
  order.forEach(([p, index], rank) => {
    running = Math.max(running, Math.min(1, (m - rank) * p));
    adjusted[index] = running;
  });
  return adjusted;
}

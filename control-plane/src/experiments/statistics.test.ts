import { describe, expect, it } from 'vitest';
import {
  averageRanks,
  holmAdjust,
  logGamma,
  mean,
  pearson,
  regularizedBeta,
  sampleVariance,
  spearman,
  tTwoSidedP,
  welchTTest,
} from './statistics.ts';

// Expected values from SciPy 1.17 (scipy.stats.ttest_ind(equal_var=False), pearsonr, spearmanr,
// scipy.special.betainc/gammaln, 2·stats.t.sf).
describe('experiment statistics', () => {
  it('computes mean and sample variance', () => {
    expect(mean([1, 2, 3, 4])).toBe(2.5);
    expect(sampleVariance([1, 2, 3, 4])).toBeCloseTo(5 / 3, 15);
    expect(sampleVariance([7])).toBeNaN();
  });

  it('evaluates ln Γ and the regularized incomplete beta function', () => {
    expect(logGamma(0.1)).toBeCloseTo(2.252712651734206, 12);
    expect(logGamma(50.5)).toBeCloseTo(146.51925549072064, 10);
    expect(logGamma(5)).toBeCloseTo(Math.log(24), 13);
    expect(regularizedBeta(0.3, 2.5, 0.5)).toBeCloseTo(0.018927124071945658, 12);
    expect(regularizedBeta(0.9, 10, 3)).toBeCloseTo(0.889130022255, 11);
    expect(regularizedBeta(0, 2, 3)).toBe(0);
    expect(regularizedBeta(1, 2, 3)).toBe(1);
  });

  it('gives two-sided p-values of Student t', () => {
    expect(tTwoSidedP(2.5, 7)).toBeCloseTo(0.04099221858575289, 12);
    expect(tTwoSidedP(-2.5, 7)).toBeCloseTo(0.04099221858575289, 12);
    expect(tTwoSidedP(0.3, 1.5)).toBeCloseTo(0.8004721968035851, 12);
    expect(tTwoSidedP(12, 40.2) / 7.250749350797535e-15).toBeCloseTo(1, 6);
    expect(tTwoSidedP(0, 5)).toBe(1);
    expect(tTwoSidedP(Infinity, 5)).toBe(0);
  });

  it("runs Welch's t-test as SciPy does", () => {
    const result = welchTTest([0.52, 0.48, 0.5, 0.47, 0.51, 0.49], [0.61, 0.58, 0.66, 0.59, 0.63])!;
    expect(result.t).toBeCloseTo(-7.319324385334709, 10);
    expect(result.df).toBeCloseTo(6.189093163789541, 10);
    expect(result.pValue).toBeCloseTo(0.0002876966526826349, 12);
    expect(result).toMatchObject({ nA: 6, nB: 5 });
    const second = welchTTest([1, 2, 3], [1.5, 2.5, 3.5, 4.5])!;
    expect(second.t).toBeCloseTo(-1.1547005383792517, 12);
    expect(second.df).toBeCloseTo(4.959183673469389, 12);
    expect(second.pValue).toBeCloseTo(0.3008027072551761, 12);
  });

  it('handles samples too small or without variance', () => {
    expect(welchTTest([1], [1, 2])).toBeNull();
    expect(welchTTest([2, 2, 2], [2, 2])).toMatchObject({ t: 0, pValue: 1, df: 3 });
    expect(welchTTest([1, 1], [2, 2])).toMatchObject({ t: -Infinity, pValue: 0 });
  });

  it('correlates like pearsonr and spearmanr; small samples get the exact Spearman p', () => {
    const x = [0.001, 0.003, 0.01, 0.03, 0.1];
    const y = [0.9, 0.7, 0.45, 0.4, 0.8];
    const p = pearson(x, y)!;
    expect(p.coefficient).toBeCloseTo(0.1633896490235057, 12);
    expect(p.pValue).toBeCloseTo(0.7928951995278124, 12);
    // Exact p: scipy.stats.permutation_test(permutation_type='pairings', n_resamples=inf).
    const s = spearman(x, y)!;
    expect(s).toMatchObject({ n: 5, method: 'exact' });
    expect(s.coefficient).toBeCloseTo(-0.4, 12);
    expect(s.pValue).toBeCloseTo(0.5166666666666667, 12);
    expect(averageRanks([1, 2, 2, 3, 4])).toEqual([1, 2.5, 2.5, 4, 5]);
    const tied = spearman([1, 2, 2, 3, 4], [10, 20, 20, 25, 24])!;
    expect(tied.coefficient).toBeCloseTo(0.8947368421052632, 12);
    expect(tied.pValue).toBeCloseTo(0.06666666666666667, 12);
    // Three pairs in perfect order happen by chance once in three (two-sided): not significant.
    expect(spearman([0.001, 0.01, 0.1], [0.76, 0.83, 0.88])).toMatchObject({ coefficient: 1, pValue: 1 / 3 });
    const eight = spearman([1, 2, 3, 4, 5, 6, 7, 8], [2, 1, 4, 3, 6, 5, 8, 7])!;
    expect(eight.coefficient).toBeCloseTo(0.9047619047619048, 12);
    expect(eight.pValue).toBeCloseTo(0.004563492063492064, 12);
    // Above 8 pairs: the t approximation, as scipy.stats.spearmanr.
    const ten = spearman([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [2, 1, 4, 3, 6, 5, 8, 7, 10, 9])!;
    expect(ten.method).toBe('t_approximation');
    expect(ten.coefficient).toBeCloseTo(0.9393939393939393, 12);
    expect(ten.pValue).toBeCloseTo(5.4840529985136686e-5, 14);
  });

  it('leaves correlation undefined for constant or short samples; perfect correlation has p = 0', () => {
    expect(pearson([1, 2, 3], [5, 5, 5])).toBeNull();
    expect(pearson([1, 2], [3, 4])).toBeNull();
    expect(pearson([1, 2, 3, 4], [2, 4, 6, 8])).toEqual({ coefficient: 1, pValue: 0, n: 4 });
  });

  it('adjusts p-values with Holm–Bonferroni, keeping input order', () => {
    const adjusted = holmAdjust([0.01, 0.04, 0.03, 0.005]);
    const expected = [0.03, 0.06, 0.06, 0.02];
    adjusted.forEach((value, i) => {
      expect(value).toBeCloseTo(expected[i]!, 15);
    });
    expect(holmAdjust([0.5, 0.6])).toEqual([1, 1]);
    expect(holmAdjust([])).toEqual([]);
  });
});

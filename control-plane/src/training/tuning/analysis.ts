import type { ParameterValue } from '../summary.ts';
import type { SearchSpace } from './search-space.ts';

/** One trial as the analysis reads it (every value from its job's rows). */
export interface TrialFacts {
  id: string;
  number: number;
  /** completed | early_stopped | failed | cancelled | running (queued, pending, running, stopping) */
  outcome: 'completed' | 'early_stopped' | 'failed' | 'cancelled' | 'running';
  status: string;
  parameters: Record<string, ParameterValue>;
  /** The last reported value of each metric. */
  metrics: Record<string, number>;
  /** The last reported value of the objective's metric; null when none was reported. */
  value: number | null;
  duration: number | null;
  cost: number | null;
  finishedAt: Date | null;
  modelId: string | null;
}

export const CONVERGENCE_TOLERANCE = 0.01;

const better = (objective: string) => (a: number, b: number) => (objective === 'maximize' ? a > b : a < b);

export function bestOf(trials: readonly TrialFacts[], objective: string): TrialFacts | null {
  const scored = trials.filter(
    (t) => t.value !== null && (t.outcome === 'completed' || t.outcome === 'early_stopped'),
  );
  const isBetter = better(objective);
  let best: TrialFacts | null = null;
  for (const t of scored) if (!best || isBetter(t.value!, best.value!)) best = t;
  return best;
}

/**
 * convergenceAnalysis from the finished trials' values in completion order. best_k = the best value after k
 * finished trials; w = max(3, ceil(n / 5)). converged: n >= 5 and |best_(n-w) - best_n| <= 1% of |best_n|;
 * convergenceEpoch: the smallest k with best_k = best_n (the trial count at which the best was found);
 * remainingImprovement: |best_(n-w) - best_n|, the last window's improvement, as an estimate of what w more
 * trials would bring (null when n <= w).
 */
export function convergence(trials: readonly TrialFacts[], objective: string) {
  const isBetter = better(objective);
  const finished = trials
    .filter((t) => t.value !== null && (t.outcome === 'completed' || t.outcome === 'early_stopped'))
    .sort((a, b) => (a.finishedAt?.getTime() ?? 0) - (b.finishedAt?.getTime() ?? 0) || a.number - b.number);
  const series: number[] = [];
  for (const t of finished) {
    const previous = series.at(-1);
    series.push(previous === undefined || isBetter(t.value!, previous) ? t.value! : previous);
  }
  const n = series.length;
  if (n === 0) {
    return {
      converged: false,
      convergenceEpoch: null,
      remainingImprovement: null,
      recommendation: 'no trial has reported the metric yet',
    };
  }
  const final = series[n - 1]!;
  const w = Math.max(3, Math.ceil(n / 5));
  const windowStart = n > w ? series[n - 1 - w]! : null;
  const recent = windowStart === null ? null : Math.abs(windowStart - final);
  const converged =
    n >= 5 && recent !== null && recent <= CONVERGENCE_TOLERANCE * Math.max(Math.abs(final), 1e-12);
  return {
    converged,
    convergenceEpoch: series.indexOf(final) + 1,
    remainingImprovement: recent,
    recommendation: converged
      ? `converged: the last ${w} trials improved the best value by at most 1%; more trials are unlikely to help`
      : n < 5
        ? 'too few finished trials to judge convergence (5 needed)'
        : `still improving: the last ${w} trials improved the best value by ${recent}; more trials may help`,
  };
}

/** Advice from the facts: the best value at the edge of a numeric range, failures, convergence. */
export function recommendations(
  trials: readonly TrialFacts[],
  space: SearchSpace,
  best: TrialFacts | null,
  converged: boolean,
): string[] {
  const out: string[] = [];
  if (best) {
    for (const spec of space) {
      if (spec.type === 'choice') continue;
      const value = best.parameters[spec.name];
      if (typeof value !== 'number') continue;
      const span = spec.max - spec.min;
      if (value - spec.min <= 0.05 * span)
        out.push(
          `${spec.name}: the best value ${value} lies at the lower edge; widen the range below ${spec.min}`,
        );
      if (spec.max - value <= 0.05 * span)
        out.push(
          `${spec.name}: the best value ${value} lies at the upper edge; widen the range above ${spec.max}`,
        );
    }
  }
  const failed = trials.filter((t) => t.outcome === 'failed').length;
  if (failed > 0 && failed >= trials.length / 4) {
    out.push(`${failed} of ${trials.length} trials failed; read their statusReason before searching further`);
  }
  if (converged) out.push('the search has converged: deploy the best trial (deploy-best)');
  return out;
}

import { better, type Direction, directionOf, finalWindow } from './metrics.ts';
import { isRunning, type RunState, runParameters, runStatus, trainingSeconds } from './runs.ts';
import { spearman, welchTTest } from './statistics.ts';

export interface ExperimentStatistics {
  total_runs: number;
  completed_runs: number;
  running_runs: number;
  failed_runs: number;
  best_metric: number | null;
  best_run: { id: string; metric: string; value: number } | null;
  total_cost: number | null;
  total_training_time: number | null;
  total_gpu_hours: number | null;
}

export interface Insight {
  type: string;
  message: string;
  confidence: number | null;
  evidence: Record<string, unknown>;
  savings: number | null;
  rule: string;
}

export interface Baseline {
  type?: string | undefined;
  name?: string | undefined;
  metrics?: Record<string, number> | undefined;
}

const round = (value: number, digits = 6) => Number(value.toPrecision(digits));
const sum = (values: (number | null)[]) => {
  const known = values.filter((v): v is number => v !== null);
  return known.length === 0 ? null : known.reduce((a, b) => a + b, 0);
};

/** Runs holding a best value of `metric`, best first (ties: the earlier run first). */
function rankedByBest(states: readonly RunState[], metric: string, direction: Direction) {
  return states
    .flatMap((s) => {
      const value = s.observations.metrics.best[metric];
      return value === undefined ? [] : [{ state: s, value }];
    })
    .sort((a, b) => (better(a.value, b.value, direction) ? -1 : better(b.value, a.value, direction) ? 1 : 0));
}

export const STATISTICS_RULES =
  'statistics: total_runs = runs; completed_runs, failed_runs = runs whose job is completed, failed; ' +
  'running_runs = runs whose job is running or stopping; best_run = the run with the best value of the ' +
  "experiment's primaryMetric over all its reports (metrics.best; minimum or maximum by the direction " +
  'rule; ties: the earlier run), best_metric = that value; total_cost (USD) and total_gpu_hours = sums ' +
  "over runs of their jobs' billed cost and GPU-hours; total_training_time = sum of the runs' " +
  'trainingTimeSeconds (seconds); each null when no run has the figure.';

export function experimentStatistics(
  states: readonly RunState[],
  primaryMetric: string,
  now: Date,
): ExperimentStatistics {
  const statuses = states.map(runStatus);
  const best = rankedByBest(states, primaryMetric, directionOf(primaryMetric))[0];
  const cost = sum(states.map((s) => s.job?.cost ?? null));
  const gpuHours = sum(states.map((s) => s.job?.gpuHours ?? null));
  return {
    total_runs: states.length,
    completed_runs: statuses.filter((s) => s === 'completed').length,
    running_runs: statuses.filter(isRunning).length,
    failed_runs: statuses.filter((s) => s === 'failed').length,
    best_metric: best ? best.value : null,
    best_run: best ? { id: best.state.row.id, metric: primaryMetric, value: best.value } : null,
    total_cost: cost === null ? null : round(cost, 10),
    total_training_time: sum(states.map((s) => trainingSeconds(s.job, now))),
    total_gpu_hours: gpuHours === null ? null : round(gpuHours, 10),
  };
}

/** Welch's test between two runs' final windows of a metric, or null without 2+ samples each. */
function windowTest(a: RunState, b: RunState, metric: string) {
  const sa = a.observations.series.get(metric);
  const sb = b.observations.series.get(metric);
  if (!sa || !sb) return null;
  return welchTTest(finalWindow(sa), finalWindow(sb));
}

/** Relative gap |a − b| / |b|; null when b is 0. */
const relative = (a: number, b: number) => (b === 0 ? null : Math.abs(a - b) / Math.abs(b));

export const INSIGHT_RULES = [
  'best_run: 2+ runs report the primary metric; the run with the best value (metrics.best) against the ' +
    "runner-up; confidence = 1 − p of Welch's t-test between their final windows, null when either has " +
    'fewer than 2 samples.',
  'baseline_comparison: the baseline names a value of the primary metric; improvement = (baseline − best) ' +
    '/ |baseline| when minimised, (best − baseline) / |baseline| when maximised; confidence null (a ' +
    'baseline is one number, nothing to test).',
  'cost_efficiency: among completed runs with a cost and a final primary metric, the cheapest run whose ' +
    'final value is within 1% (relative) of the best final value, when it is cheaper than that best run; ' +
    'savings = best run cost − its cost (USD); confidence null (an equivalence is not a tested claim).',
  'parameter_correlation: a numeric parameter and the final primary metric over 4+ completed runs with ' +
    "Spearman's ρ at p < 0.05 (exact p up to 8 runs, see compare); confidence = 1 − p.",
  'failures: failed runs exist; confidence 1 (a count).',
];

export function experimentInsights(
  states: readonly RunState[],
  primaryMetric: string,
  baseline: Baseline | null,
): Insight[] {
  const direction = directionOf(primaryMetric);
  const insights: Insight[] = [];
  const ranked = rankedByBest(states, primaryMetric, direction);
  const [first, second] = ranked;
  if (first && second) {
    const test = windowTest(first.state, second.state, primaryMetric);
    const gap = relative(first.value, second.value);
    insights.push({
      type: 'best_run',
      message:
        `Run ${first.state.row.name} has the best ${primaryMetric} (${round(first.value)}), ` +
        `${gap === null ? 'ahead of' : `${round(gap * 100, 3)}% better than`} run ${second.state.row.name} ` +
        `(${round(second.value)})${test ? ` (Welch p = ${round(test.pValue, 3)})` : ''}.`,
      confidence: test ? round(1 - test.pValue) : null,
      evidence: {
        metric: primaryMetric,
        direction,
        bestRun: { id: first.state.row.id, value: first.value },
        runnerUp: { id: second.state.row.id, value: second.value },
        test: test ? { name: 'welch_t', t: test.t, df: test.df, pValue: test.pValue } : null,
      },
      savings: null,
      rule: INSIGHT_RULES[0]!,
    });
  }
  const baseValue = baseline?.metrics?.[primaryMetric];
  if (first && typeof baseValue === 'number' && baseValue !== 0) {
    const improvement =
      direction === 'minimize'
        ? (baseValue - first.value) / Math.abs(baseValue)
        : (first.value - baseValue) / Math.abs(baseValue);
    insights.push({
      type: 'baseline_comparison',
      message:
        `Best ${primaryMetric} ${round(first.value)} is ${round(Math.abs(improvement) * 100, 3)}% ` +
        `${improvement >= 0 ? 'better' : 'worse'} than the baseline${baseline?.name ? ` ${baseline.name}` : ''} ` +
        `(${baseValue}).`,
      confidence: null,
      evidence: { metric: primaryMetric, baseline: baseValue, bestRun: first.state.row.id, improvement },
      savings: null,
      rule: INSIGHT_RULES[1]!,
    });
  }
  insights.push(...costInsight(states, primaryMetric, direction));
  insights.push(...correlationInsights(states, primaryMetric, direction));
  const failed = states.filter((s) => runStatus(s) === 'failed');
  if (failed.length > 0) {
    insights.push({
      type: 'failures',
      message: `${failed.length} of ${states.length} runs failed.`,
      confidence: 1,
      evidence: { failedRuns: failed.map((s) => s.row.id), totalRuns: states.length },
      savings: null,
      rule: INSIGHT_RULES[4]!,
    });
  }
  return insights;
}

function costInsight(states: readonly RunState[], metric: string, direction: Direction): Insight[] {
  const candidates = states.flatMap((s) => {
    const value = s.observations.metrics.final?.[metric];
    const cost = s.job?.cost ?? null;
    return value === undefined || cost === null ? [] : [{ state: s, value, cost }];
  });
  if (candidates.length < 2) return [];
  const best = candidates.reduce((a, b) => (better(b.value, a.value, direction) ? b : a));
  const close = candidates.filter((c) => {
    const gap = relative(c.value, best.value);
    return c.value === best.value || (gap !== null && gap <= 0.01);
  });
  const cheapest = close.reduce((a, b) => (b.cost < a.cost ? b : a));
  if (cheapest === best || cheapest.cost >= best.cost) return [];
  const savings = round(best.cost - cheapest.cost, 10);
  return [
    {
      type: 'cost_efficiency',
      message:
        `Run ${cheapest.state.row.name} reaches ${metric} ${round(cheapest.value)}, within 1% of the best ` +
        `(${round(best.value)}, run ${best.state.row.name}), for $${round(cheapest.cost, 6)} instead of ` +
        `$${round(best.cost, 6)}.`,
      confidence: null,
      evidence: {
        metric,
        bestRun: { id: best.state.row.id, value: best.value, cost: best.cost },
        cheaperRun: { id: cheapest.state.row.id, value: cheapest.value, cost: cheapest.cost },
      },
      savings,
      rule: INSIGHT_RULES[2]!,
    },
  ];
}

function correlationInsights(states: readonly RunState[], metric: string, direction: Direction): Insight[] {
  const completed = states.flatMap((s) => {
    const value = s.observations.metrics.final?.[metric];
    return value === undefined ? [] : [{ parameters: runParameters(s), value }];
  });
  if (completed.length < 4) return [];
  const names = [...new Set(completed.flatMap((c) => Object.keys(c.parameters)))].sort();
  const insights: Insight[] = [];
  for (const name of names) {
    const pairs = completed.filter((c) => typeof c.parameters[name] === 'number');
    if (pairs.length < 4) continue;
    const result = spearman(
      pairs.map((p) => p.parameters[name] as number),
      pairs.map((p) => p.value),
    );
    if (!result || !(result.pValue < 0.05)) continue;
    // ρ > 0: higher parameter, higher metric; better means lower for minimised metrics.
    const higherIsBetter = result.coefficient > 0 === (direction === 'maximize');
    insights.push({
      type: 'parameter_correlation',
      message:
        `${higherIsBetter ? 'Higher' : 'Lower'} ${name} goes with better ${metric} ` +
        `(Spearman ρ = ${round(result.coefficient, 3)}, p = ${round(result.pValue, 3)}, ${result.n} runs).`,
      confidence: round(1 - result.pValue),
      evidence: { parameter: name, metric, spearman: result.coefficient, pValue: result.pValue, n: result.n },
      savings: null,
      rule: INSIGHT_RULES[3]!,
    });
  }
  return insights;
}

import type { MetricPoint, TrainingJobSummary } from '../training/summary.ts';

export type Direction = 'minimize' | 'maximize';

/** Words that make a metric one to minimise; every other metric (accuracy, f1, bleu, auc, ...) is maximised. */
export const MINIMISED_WORDS = [
  'loss',
  'error',
  'err',
  'perplexity',
  'ppl',
  'wer',
  'cer',
  'mae',
  'mse',
  'rmse',
  'latency',
  'time',
  'duration',
  'seconds',
  'cost',
  'memory',
] as const;

const MINIMISED = new Set<string>(MINIMISED_WORDS);

export const DIRECTION_RULE =
  'A metric is minimised when one of the words of its name (split at non-letters and camelCase, ' +
  `lowercased) is one of ${MINIMISED_WORDS.join(', ')} (loss, val_loss, error_rate, bestLoss); every ` +
  'other metric (accuracy, f1, bleu, auc, throughput, ...) is maximised.';

/** The documented direction of a metric, from the words of its name. */
export function directionOf(metric: string): Direction {
  const words = metric
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z]+/);
  return words.some((w) => MINIMISED.has(w)) ? 'minimize' : 'maximize';
}

/** Whether `a` is strictly better than `b` in that direction. */
export function better(a: number, b: number, direction: Direction): boolean {
  return direction === 'minimize' ? a < b : a > b;
}

export interface RunMetrics {
  /** The latest reported value of each metric. */
  current: Record<string, number>;
  /** The best reported value of each metric, in its direction. */
  best: Record<string, number>;
  /** The latest values once the job completed; null before. */
  final: Record<string, number> | null;
}

export interface RunObservations {
  metrics: RunMetrics;
  /** Every reported value of each metric, oldest first: the samples the statistical tests use. */
  series: Map<string, number[]>;
}

// The summary's latest values under the names runs show them, used when a job has no report history.
const SUMMARY_NAMES = [
  ['loss', 'currentLoss', 'bestLoss'],
  ['learning_rate', 'learningRate', null],
  ['throughput', 'throughput', null],
] as const;

/**
 * A run's metrics from its job's reports: current = the latest value of each name, best = the minimum or
 * maximum (directionOf) over every report, final = current once the job is completed. A job without a
 * report history shows the summary's latest loss (best: its bestLoss), learning_rate and throughput.
 */
export function observeRun(job: TrainingJobSummary | null, history: readonly MetricPoint[]): RunObservations {
  const current: Record<string, number> = {};
  const best: Record<string, number> = {};
  const series = new Map<string, number[]>();
  for (const point of history) {
    for (const [name, value] of Object.entries(point.values ?? {})) {
      if (typeof value !== 'number' || !Number.isFinite(value)) continue;
      current[name] = value;
      const previous = best[name];
      if (previous === undefined || better(value, previous, directionOf(name))) best[name] = value;
      const values = series.get(name);
      if (values) values.push(value);
      else series.set(name, [value]);
    }
  }
  if (job && series.size === 0) {
    for (const [name, latest, bestOf] of SUMMARY_NAMES) {
      const value = job.metrics[latest];
      if (value === null) continue;
      current[name] = value;
      best[name] = (bestOf ? job.metrics[bestOf] : null) ?? value;
    }
  }
  const final = job?.status === 'completed' ? { ...current } : null;
  return { metrics: { current, best, final }, series };
}

/**
 * The samples a run's test uses for one metric: the last 20% of its reported values, at least 5 (all of
 * them when fewer), so tests compare where training ended rather than where it started.
 */
export function finalWindow(values: readonly number[]): number[] {
  const size = Math.min(values.length, Math.max(5, Math.ceil(values.length * 0.2)));
  return values.slice(values.length - size);
}

export const WINDOW_RULE =
  "Samples of a run for a metric: the last 20% of the values its trainer reported (the job's metric " +
  'history), at least 5, all of them when fewer.';

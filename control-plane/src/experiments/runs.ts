import type { ExperimentRun } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { MetricPoint, ParameterValue, TrainingJobSummary } from '../training/summary.ts';
import { observeRun, type RunObservations } from './metrics.ts';

/** Reads the account's training jobs among `ids` (absent ids are not the account's or are gone). */
export type SummaryLoader = (
  db: Database,
  accountId: string,
  ids: readonly string[],
  now: Date,
) => Promise<TrainingJobSummary[]>;

/** A run with what its job did, read now. */
export interface RunState {
  row: ExperimentRun;
  /** Null when the job's row is gone. */
  job: TrainingJobSummary | null;
  observations: RunObservations;
}

// Metric histories are read one job at a time; this many at once keeps a large experiment from taking
// every pooled connection.
const HISTORY_CONCURRENCY = 4;

async function histories(jobs: (TrainingJobSummary | null)[]): Promise<MetricPoint[][]> {
  const out: MetricPoint[][] = jobs.map(() => []);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const index = next++;
      const load = jobs[index]?.metricHistory;
      if (load) out[index] = await load();
    }
  };
  await Promise.all(Array.from({ length: Math.min(HISTORY_CONCURRENCY, jobs.length) }, worker));
  return out;
}

/** Each run with its job's summary and observed metrics, in the order of `rows`. */
export async function loadRunStates(
  db: Database,
  loadSummaries: SummaryLoader,
  accountId: string,
  rows: readonly ExperimentRun[],
  now: Date,
): Promise<RunState[]> {
  const ids = [...new Set(rows.map((r) => r.trainingJobId))];
  const summaries = await loadSummaries(db, accountId, ids, now);
  const byId = new Map(summaries.map((s) => [s.id, s]));
  const jobs = rows.map((r) => byId.get(r.trainingJobId) ?? null);
  const reports = await histories(jobs);
  return rows.map((row, i) => ({ row, job: jobs[i]!, observations: observeRun(jobs[i]!, reports[i]!) }));
}

/** Status of a run: its job's status, `deleted` once the job's row is gone. */
export function runStatus(state: RunState): string {
  return state.job?.status ?? 'deleted';
}

const RUNNING = new Set(['running', 'stopping']);

/**
 * Seconds the job trained: completedAt (or now while it is running or stopping) − startedAt; null when it
 * never started or ended without a completion time (stopped).
 */
export function trainingSeconds(job: TrainingJobSummary | null, now: Date): number | null {
  if (!job?.startedAt) return null;
  const end = job.completedAt ? Date.parse(job.completedAt) : RUNNING.has(job.status) ? now.getTime() : null;
  if (end === null) return null;
  return Math.max(0, Math.round((end - Date.parse(job.startedAt)) / 1000));
}

/** The job's hyperparameters, plus the names given at link time that the job does not have. */
export function runParameters(state: RunState): Record<string, ParameterValue> {
  return { ...(state.row.parameters as Record<string, ParameterValue>), ...(state.job?.parameters ?? {}) };
}

export function isRunning(status: string): boolean {
  return RUNNING.has(status);
}

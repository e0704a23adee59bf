import type { TrainingJob } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';

/** A hyperparameter value as the trainer gets it. */
export type ParameterValue = string | number | boolean | null;

/** One metrics report of a trainer: the values it sent, with the step and epoch they belong to. */
export interface MetricPoint {
  step: number | null;
  epoch: number | null;
  at: string;
  values: Record<string, number>;
}

/**
 * A training job as other areas (experiments, tuning) read it. Every value comes from the job's rows:
 * metrics from the trainer's reports (null until one arrives), gpuHours and cost from its closed billing
 * sessions (usage_records) plus the open one at the rate fixed at placement. The shape only grows.
 */
export type TrainingJobSummary = {
  id: string;
  accountId: string;
  name: string;
  /** pending | queued | running | stopping | stopped | completed | failed | cancelled */
  status: string;
  /** The hyperparameters as one flat record (learning_rate, batch_size, epochs, ...). */
  parameters: Record<string, ParameterValue>;
  metrics: {
    currentLoss: number | null;
    bestLoss: number | null;
    learningRate: number | null;
    throughput: number | null;
  };
  /** Every metrics report in the order received (loaded on demand). */
  metricHistory?: () => Promise<MetricPoint[]>;
  /** GPU-hours billed so far (null before the job ever ran). */
  gpuHours: number | null;
  /** USD billed so far (null before the job ever ran). */
  cost: number | null;
  startedAt: string | null;
  completedAt: string | null;
  createdAt: string;
  modelType: string;
  datasetId: string | null;
  /** The tuning job the job is a trial of, if any. */
  tuneId: string | null;
  /** Its artifacts and checkpoints not deleted, oldest first (loadTrainingJobSummaries fills them). */
  artifacts?: JobArtifactSummary[];
};

export interface JobArtifactSummary {
  id: string;
  type: string;
  name: string;
  path: string;
  sizeBytes: number | null;
  sha256: string | null;
  downloadUrl: string;
  createdAt: string;
}

const HOUR_MS = 3_600_000;

const num = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;

/** The latest values a trainer reported, as the summary and the API name them. */
export function reportedMetrics(row: Pick<TrainingJob, 'metrics'>) {
  const m = (row.metrics ?? {}) as {
    currentLoss?: unknown;
    bestLoss?: unknown;
    learningRate?: unknown;
    throughput?: unknown;
    memoryUsage?: unknown;
  };
  return {
    currentLoss: num(m.currentLoss),
    bestLoss: num(m.bestLoss),
    learningRate: num(m.learningRate),
    throughput: num(m.throughput),
    memoryUsage: num(m.memoryUsage),
  };
}

export interface JobUsage {
  gpuHours: number | null;
  cost: number | null;
}

/**
 * GPU-hours and cost per job: closed sessions (usage_records of resource type training_job) plus the open
 * session at the job's hourly rate up to `now`. Null for a job that never had a session.
 */
export async function loadJobUsage(
  db: Database,
  jobs: Pick<TrainingJob, 'id' | 'hourlyRate' | 'sessionStartedAt' | 'gpusPerWorker' | 'workers'>[],
  now: Date,
): Promise<Map<string, JobUsage>> {
  const ids = jobs.map((j) => j.id);
  const closed =
    ids.length === 0
      ? []
      : await db.prisma.usageRecord.groupBy({
          by: ['resourceId'],
          where: { resourceType: 'training_job', resourceId: { in: ids } },
          _sum: { gpuHours: true, cost: true },
        });
  const byId = new Map(closed.map((r) => [r.resourceId, r._sum]));
  const result = new Map<string, JobUsage>();
  for (const job of jobs) {
    const sum = byId.get(job.id);
    let gpuHours = sum ? (sum.gpuHours ?? 0) : null;
    let cost = sum ? (sum.cost ?? 0) : null;
    if (job.sessionStartedAt) {
      const ms = Math.max(0, now.getTime() - job.sessionStartedAt.getTime());
      gpuHours = (gpuHours ?? 0) + (ms / HOUR_MS) * job.gpusPerWorker * job.workers;
      cost = (cost ?? 0) + (job.hourlyRate * ms) / HOUR_MS;
    }
    result.set(job.id, {
      gpuHours: gpuHours === null ? null : Math.round(gpuHours * 1e6) / 1e6,
      cost: cost === null ? null : Math.round(cost * 1e4) / 1e4,
    });
  }
  return result;
}

/** Every metrics report of a job, oldest first. */
export async function loadMetricHistory(db: Database, jobId: string): Promise<MetricPoint[]> {
  const rows = await db.prisma.trainingMetric.findMany({ where: { jobId }, orderBy: { id: 'asc' } });
  return rows.map((r) => ({
    step: r.step,
    epoch: r.epoch,
    at: r.at.toISOString(),
    values: r.values as Record<string, number>,
  }));
}

export function summarize(row: TrainingJob, usage: JobUsage | undefined, db: Database): TrainingJobSummary {
  const { memoryUsage: _memory, ...metrics } = reportedMetrics(row);
  return {
    id: row.id,
    accountId: row.accountId,
    name: row.name,
    status: row.status,
    parameters: (row.parameters ?? {}) as Record<string, ParameterValue>,
    metrics,
    metricHistory: () => loadMetricHistory(db, row.id),
    gpuHours: usage?.gpuHours ?? null,
    cost: usage?.cost ?? null,
    startedAt: row.startedAt?.toISOString() ?? null,
    completedAt: row.completedAt?.toISOString() ?? null,
    createdAt: row.createdAt.toISOString(),
    modelType: row.modelType,
    datasetId: row.datasetId,
    tuneId: row.tuneId,
  };
}

/**
 * Summaries of the account's jobs among `ids`, in the order of `ids`; ids that are not the account's (or
 * do not exist) are left out, so callers can tell "not found" by absence.
 */
export async function loadTrainingJobSummaries(
  db: Database,
  accountId: string,
  ids: readonly string[],
  now: Date = new Date(),
): Promise<TrainingJobSummary[]> {
  if (ids.length === 0) return [];
  const rows = await db.prisma.trainingJob.findMany({ where: { accountId, id: { in: [...ids] } } });
  const [usage, artifacts] = await Promise.all([
    loadJobUsage(db, rows, now),
    loadArtifacts(db, accountId, ids),
  ]);
  const byId = new Map(rows.map((r) => [r.id, r]));
  return ids.flatMap((id) => {
    const row = byId.get(id);
    return row ? [{ ...summarize(row, usage.get(id), db), artifacts: artifacts.get(id) ?? [] }] : [];
  });
}

async function loadArtifacts(
  db: Database,
  accountId: string,
  jobIds: readonly string[],
): Promise<Map<string, JobArtifactSummary[]>> {
  const rows = await db.prisma.trainingArtifact.findMany({
    where: { accountId, jobId: { in: [...jobIds] }, deletedAt: null },
    orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
  });
  const out = new Map<string, JobArtifactSummary[]>();
  for (const row of rows) {
    const list = out.get(row.jobId) ?? [];
    list.push({
      id: row.id,
      type: row.type,
      name: row.name,
      path: row.path,
      sizeBytes: row.sizeBytes === null ? null : Number(row.sizeBytes),
      sha256: row.sha256,
      downloadUrl: `/v2/training/jobs/${row.jobId}/artifacts/${row.id}/download`,
      createdAt: row.createdAt.toISOString(),
    });
    out.set(row.jobId, list);
  }
  return out;
}

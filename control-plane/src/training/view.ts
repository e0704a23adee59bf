import type { TrainingCheckpoint, TrainingJob } from '../db/generated/client.ts';
import type { PlacedWorker } from './launcher.ts';
import { type JobUsage, reportedMetrics } from './summary.ts';

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const num = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;

/** Seconds the job's containers have run (billed sessions), from its usage: hours = gpuHours / GPUs. */
function elapsedSeconds(job: TrainingJob, usage: JobUsage | undefined): number | null {
  if (!usage || usage.gpuHours === null) return null;
  const gpus = job.gpusPerWorker * job.workers;
  return Math.round((usage.gpuHours / gpus) * 3600);
}

export function progressOf(job: TrainingJob, usage: JobUsage | undefined) {
  const p = (job.progress ?? {}) as Record<string, unknown>;
  const currentEpoch = num(p['currentEpoch']);
  const totalEpochs = num(p['totalEpochs']) ?? num((job.parameters as Record<string, unknown>)['epochs']);
  const currentStep = num(p['currentStep']);
  const totalSteps = num(p['totalSteps']);
  let fraction: number | null = null;
  if (job.status === 'completed') fraction = 1;
  else if (currentStep !== null && totalSteps) fraction = currentStep / totalSteps;
  else if (currentEpoch !== null && totalEpochs) fraction = currentEpoch / totalEpochs;
  if (fraction !== null) fraction = Math.min(1, Math.max(0, fraction));
  const elapsedTime = elapsedSeconds(job, usage);
  const remainingTime =
    job.status === 'completed'
      ? 0
      : fraction && elapsedTime !== null && fraction > 0
        ? Math.round((elapsedTime * (1 - fraction)) / fraction)
        : null;
  return {
    currentEpoch,
    totalEpochs,
    currentStep,
    totalSteps,
    percentage: fraction === null ? null : Math.round(fraction * 10_000) / 100,
    elapsedTime,
    remainingTime,
  };
}

export function viewCheckpoint(c: TrainingCheckpoint) {
  return {
    id: c.id,
    epoch: c.epoch,
    step: c.step,
    loss: c.loss,
    path: c.path,
    size: c.sizeBytes === null ? null : Number(c.sizeBytes),
    createdAt: c.createdAt.toISOString(),
  };
}

/** The list item: the summary fields plus progress and metrics {loss, learningRate, throughput}. */
export function viewJobListItem(job: TrainingJob, usage: JobUsage | undefined) {
  const m = reportedMetrics(job);
  return {
    id: job.id,
    name: job.name,
    description: job.description,
    status: job.status,
    statusReason: job.statusReason,
    modelType: job.modelType,
    datasetId: job.datasetId,
    gpuType: job.gpuType.toLowerCase(),
    maxWorkers: job.workers,
    priority: job.priority,
    tags: job.tags,
    tuneId: job.tuneId,
    progress: progressOf(job, usage),
    metrics: { loss: m.currentLoss, learningRate: m.learningRate, throughput: m.throughput },
    createdAt: job.createdAt.toISOString(),
    updatedAt: job.updatedAt.toISOString(),
    startedAt: iso(job.startedAt),
    completedAt: iso(job.completedAt),
  };
}

/** The job as GET /v2/training/jobs/{id} shows it; every figure from its rows (see the route's description). */
export function viewJob(
  job: TrainingJob,
  usage: JobUsage | undefined,
  checkpoints: TrainingCheckpoint[],
  currentPrice: number | null,
  now: Date,
) {
  const progress = progressOf(job, usage);
  const placed = (job.placement ?? []) as unknown as PlacedWorker[];
  const hourly =
    placed.length > 0
      ? job.hourlyRate
      : currentPrice === null
        ? null
        : currentPrice * job.gpusPerWorker * job.workers;
  const elapsedHours = progress.elapsedTime === null ? null : progress.elapsedTime / 3600;
  const totalHours =
    elapsedHours !== null && progress.remainingTime !== null
      ? elapsedHours + progress.remainingTime / 3600
      : null;
  const stop = job.stopRequest as { saveCheckpoint?: boolean; reason?: string | null; at?: string } | null;
  return {
    ...viewJobListItem(job, usage),
    config: job.config as Record<string, unknown>,
    parameters: job.parameters as Record<string, unknown>,
    image: job.image,
    command: job.command,
    attempt: job.attempt,
    exitCode: job.exitCode,
    trialNumber: job.trialNumber,
    resumedFrom: job.resumeFrom,
    preemptions: job.preemptions,
    preemptedAt: job.preemptedAt?.toISOString() ?? null,
    stopRequest: stop
      ? {
          saveCheckpoint: stop.saveCheckpoint ?? false,
          reason: stop.reason ?? null,
          requestedAt: stop.at ?? null,
        }
      : null,
    resourceAllocation: {
      gpuType: job.gpuType.toLowerCase(),
      workers: job.workers,
      gpusPerWorker: job.gpusPerWorker,
      memoryPerWorker: null,
      placement: placed.map((w) => ({
        rank: w.rank,
        hostId: w.hostId,
        gpuIndices: w.gpus.map((g) => g.index),
      })),
    },
    estimatedCost: {
      hourly,
      total:
        hourly !== null && totalHours !== null ? Math.round(hourly * totalHours * 10_000) / 10_000 : null,
    },
    metrics: reportedMetrics(job),
    resourceUsage: { gpuHours: usage?.gpuHours ?? null, cost: usage?.cost ?? null, efficiency: null },
    checkpoints: checkpoints.map(viewCheckpoint),
    estimatedCompletion:
      job.status === 'running' && progress.remainingTime !== null
        ? new Date(now.getTime() + progress.remainingTime * 1000).toISOString()
        : null,
  };
}

export type JobView = ReturnType<typeof viewJob>;

/** The short form's creation answer. */
export function viewShortCreated(job: TrainingJob, currentPrice: number | null) {
  const hourly = currentPrice === null ? null : currentPrice * job.gpusPerWorker * job.workers;
  return {
    jobId: job.id,
    name: job.name,
    status: job.status,
    estimatedStartTime: job.status === 'pending' ? job.updatedAt.toISOString() : null,
    estimatedDuration: null,
    estimatedCost: { gpuCost: null, storageCost: null, totalCost: null, hourly },
    createdAt: job.createdAt.toISOString(),
  };
}

import type { TrainingJob } from '../../db/generated/client.ts';
import type { JobInput } from '../config.ts';
import type { ParameterValue } from '../summary.ts';
import type { HyperbandConfig } from './samplers.ts';

// What a tuning job's row holds besides its columns (its settings and the sampler's state), read by the
// API side (views) and the driver (steps) alike.

export interface TuneSettings {
  maxTrials: number;
  maxConcurrent: number;
  earlyStopping: { metric: string; patience: number; minDelta: number } | null;
  budget: { maxGpuHours: number | null; maxCost: number | null };
  hyperband: HyperbandConfig | null;
  seed: number;
}

export interface TrialMeta {
  bracket?: number;
  rung?: number;
  config?: number;
}

export interface SamplerState {
  gridNext?: number;
  trials?: Record<string, TrialMeta>;
  earlyStopped?: number[];
  hyperband?: {
    bracket: number;
    rung: number;
    members: { config: number; params: Record<string, ParameterValue> }[];
  };
  nextConfig?: number;
}

/** A trial's training-job statuses while it still runs. */
export const ACTIVE = ['queued', 'pending', 'running', 'stopping'];

/** A job row as the input its trials are made from (their parameters replaced). */
export function inputOfJob(job: TrainingJob): JobInput {
  return {
    name: job.name,
    description: job.description,
    modelType: job.modelType,
    datasetId: job.datasetId,
    tags: job.tags,
    config: job.config as Record<string, unknown>,
    parameters: job.parameters as Record<string, ParameterValue>,
    gpuType: job.gpuType as JobInput['gpuType'],
    gpusPerWorker: job.gpusPerWorker,
    workers: job.workers,
    priority: job.priority,
    image: job.image,
    command: job.command,
    customCode: null,
    form: 'full',
  };
}

/** The last reported value of each metric, over a job's metric points in order. */
export function lastValues(points: { values: unknown }[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of points) Object.assign(out, p.values as Record<string, number>);
  return out;
}

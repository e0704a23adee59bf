import { ApiError } from '@anvil/shared';
import { GPU_TYPES, type GpuType } from '../scheduler/gpu-types.ts';
import { DEFAULT_TRAINER_IMAGE } from './contract.ts';
import type { ParameterValue } from './summary.ts';

export const MODEL_TYPES = ['llm', 'vision', 'multimodal', 'custom'] as const;
export const PRIORITIES = ['high', 'normal', 'low'] as const;
export const LEARNING_RATE_MIN = 1e-6;
export const LEARNING_RATE_MAX = 1e-1;
export const MAX_WORKERS = 32;
export const MAX_GPUS_PER_WORKER = 16;

/** The full creation form (spec: Training job), with Anvil's extensions under config. */
export interface FullJobRequest {
  name: string;
  modelType: string;
  datasetId: string;
  config: Record<string, unknown>;
  description?: string;
  tags?: string[];
  gpuType?: string;
  maxWorkers?: number;
  priority?: string;
}

/** The short creation form. */
export interface ShortJobRequest {
  name: string;
  description?: string;
  framework?: string;
  modelConfig?: { modelType?: string; baseModel?: string; customCode?: string };
  datasetConfig?: { datasetId?: string; datasetUrl?: string; format?: string };
  hyperparameters?: { learningRate?: number; batchSize?: number; epochs?: number; optimizer?: string };
  infrastructure?: { gpuType?: string; gpuCount?: number; memory?: unknown; storage?: unknown };
}

export type CreateJobRequest = FullJobRequest | ShortJobRequest;

/** What a job is made of, whichever form created it. */
export interface JobInput {
  name: string;
  description: string | null;
  modelType: string;
  datasetId: string | null;
  tags: string[];
  config: Record<string, unknown>;
  parameters: Record<string, ParameterValue>;
  gpuType: GpuType;
  gpusPerWorker: number;
  workers: number;
  priority: string;
  image: string;
  command: string[];
  /** Short form customCode: written into the container and run with python. */
  customCode: string | null;
  form: 'full' | 'short';
}

export function isShortForm(body: CreateJobRequest): body is ShortJobRequest {
  return !('config' in body) && !('modelType' in body);
}

export function configurationError(field: string, reason: string): ApiError {
  return new ApiError('CONFIGURATION_ERROR', `${field} ${reason}`, { field, reason });
}

/** learningRate → learning_rate: one spelling for parameters, whichever form or search space named them. */
export function snakeCase(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function scalar(value: unknown): value is ParameterValue {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value);
}

/**
 * The hyperparameters as one flat record: config.training, config.optimization and config.parameters
 * (full form) or hyperparameters (short form), names in snake_case; nested objects are left out (they stay
 * in config).
 */
export function flattenParameters(config: Record<string, unknown>): Record<string, ParameterValue> {
  const out: Record<string, ParameterValue> = {};
  for (const section of ['parameters', 'optimization', 'training'] as const) {
    const values = config[section];
    if (!isRecord(values)) continue;
    for (const [key, value] of Object.entries(values)) if (scalar(value)) out[snakeCase(key)] = value;
  }
  return out;
}

export function checkParameters(parameters: Record<string, ParameterValue>, prefix: string): void {
  const lr = parameters['learning_rate'];
  if (lr !== undefined && lr !== null) {
    if (typeof lr !== 'number' || !Number.isFinite(lr) || lr < LEARNING_RATE_MIN || lr > LEARNING_RATE_MAX) {
      throw configurationError(
        `${prefix}learning_rate`,
        `must be a number between ${LEARNING_RATE_MIN} and ${LEARNING_RATE_MAX} (got ${JSON.stringify(lr)})`,
      );
    }
  }
  for (const name of ['epochs', 'batch_size', 'warmup_steps', 'gradient_accumulation_steps'] as const) {
    const value = parameters[name];
    if (value === undefined || value === null) continue;
    const min = name === 'warmup_steps' ? 0 : 1;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
      throw configurationError(`${prefix}${name}`, `must be an integer >= ${min}`);
    }
  }
  const decay = parameters['weight_decay'];
  if (decay !== undefined && decay !== null && (typeof decay !== 'number' || decay < 0)) {
    throw configurationError(`${prefix}weight_decay`, 'must be a number >= 0');
  }
}

/**
 * h100, H100, "NVIDIA H100" → H100; unknown names are a configuration error. Omitted: the account's
 * preferences.default_gpu_type when it names a known type, else H100.
 */
export function gpuTypeOfRequest(
  value: string | undefined,
  field: string,
  fallback: string | null = null,
): GpuType {
  if (value === undefined) {
    return fallback !== null && (GPU_TYPES as readonly string[]).includes(fallback)
      ? (fallback as GpuType)
      : 'H100';
  }
  const upper = value.toUpperCase().replace(/[\s_-]/g, '');
  const match = GPU_TYPES.find((t) => upper === t || upper.endsWith(t));
  if (!match)
    throw configurationError(field, `must be one of ${GPU_TYPES.map((t) => t.toLowerCase()).join(', ')}`);
  return match;
}

function stringArray(value: unknown, field: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string') || value.length > 100) {
    throw configurationError(field, 'must be an array of at most 100 strings');
  }
  return value as string[];
}

function fullInput(body: FullJobRequest, defaultGpuType: string | null): JobInput {
  const config = body.config;
  const training = config['training'];
  if (training !== undefined && !isRecord(training))
    throw configurationError('config.training', 'must be an object');
  const parameters = flattenParameters(config);
  checkParameters(parameters, 'config.training.');
  const image = config['image'];
  if (image !== undefined && (typeof image !== 'string' || image.length === 0 || image.length > 512)) {
    throw configurationError('config.image', 'must be a Docker image reference of 1-512 characters');
  }
  const gpusPerWorker = config['gpusPerWorker'] ?? 1;
  if (
    typeof gpusPerWorker !== 'number' ||
    !Number.isInteger(gpusPerWorker) ||
    gpusPerWorker < 1 ||
    gpusPerWorker > MAX_GPUS_PER_WORKER
  ) {
    throw configurationError('config.gpusPerWorker', `must be an integer from 1 to ${MAX_GPUS_PER_WORKER}`);
  }
  return {
    name: body.name,
    description: body.description ?? null,
    modelType: body.modelType,
    datasetId: body.datasetId,
    tags: body.tags ?? [],
    config,
    parameters,
    gpuType: gpuTypeOfRequest(body.gpuType, 'gpuType', defaultGpuType),
    gpusPerWorker,
    workers: body.maxWorkers ?? 1,
    priority: body.priority ?? 'normal',
    image: (image as string | undefined) ?? DEFAULT_TRAINER_IMAGE,
    command: stringArray(config['command'], 'config.command'),
    customCode: null,
    form: 'full',
  };
}

function shortInput(body: ShortJobRequest, defaultGpuType: string | null): JobInput {
  const hp = body.hyperparameters ?? {};
  const config: Record<string, unknown> = {
    framework: body.framework ?? 'pytorch',
    baseModel: body.modelConfig?.baseModel ?? null,
    training: {
      ...(hp.epochs !== undefined ? { epochs: hp.epochs } : {}),
      ...(hp.batchSize !== undefined ? { batch_size: hp.batchSize } : {}),
      ...(hp.learningRate !== undefined ? { learning_rate: hp.learningRate } : {}),
      ...(hp.optimizer !== undefined ? { optimizer: hp.optimizer } : {}),
    },
    modelConfig: body.modelConfig ?? {},
    datasetConfig: body.datasetConfig ?? {},
    infrastructure: body.infrastructure ?? {},
  };
  const parameters = flattenParameters(config);
  checkParameters(parameters, 'hyperparameters.');
  const datasetId = body.datasetConfig?.datasetId;
  if (!datasetId) {
    // A dataset is always one of the account's (so it can be mounted and kept from deletion); a URL is
    // first made a dataset with POST /v2/training/datasets {dataUrl}.
    throw new ApiError(
      'DATASET_NOT_FOUND',
      'datasetConfig.datasetId is required (create a dataset from a URL first)',
      {
        datasetId: null,
        datasetUrl: body.datasetConfig?.datasetUrl ?? null,
      },
    );
  }
  const modelType = body.modelConfig?.modelType;
  return {
    name: body.name,
    description: body.description ?? null,
    modelType: modelType === 'language_model' || modelType === undefined ? 'llm' : modelType,
    datasetId,
    tags: [],
    config,
    parameters,
    gpuType: gpuTypeOfRequest(body.infrastructure?.gpuType, 'infrastructure.gpuType', defaultGpuType),
    gpusPerWorker: body.infrastructure?.gpuCount ?? 1,
    workers: 1,
    priority: 'normal',
    image: DEFAULT_TRAINER_IMAGE,
    command: [],
    customCode: body.modelConfig?.customCode ?? null,
    form: 'short',
  };
}

/** Normalises either creation form; configuration errors answer 400 CONFIGURATION_ERROR {field, reason}. */
export function jobInputOf(body: CreateJobRequest, defaultGpuType: string | null = null): JobInput {
  const input = isShortForm(body)
    ? shortInput(body, defaultGpuType)
    : fullInput(body as FullJobRequest, defaultGpuType);
  const name = input.name.trim();
  if (name === '')
    throw new ApiError('VALIDATION_ERROR', 'name must not be blank', { field: 'name', reason: 'blank' });
  if (!(MODEL_TYPES as readonly string[]).includes(input.modelType)) {
    throw configurationError('modelType', `must be one of ${MODEL_TYPES.join(', ')}`);
  }
  return { ...input, name };
}

/** A job input with hyperparameters replaced (tuning trials, deploy-best): config.training gets them too. */
export function withParameters(input: JobInput, overrides: Record<string, ParameterValue>): JobInput {
  const normalised = Object.fromEntries(Object.entries(overrides).map(([k, v]) => [snakeCase(k), v]));
  const parameters = { ...input.parameters, ...normalised };
  checkParameters(parameters, 'parameters.');
  const training = isRecord(input.config['training']) ? input.config['training'] : {};
  return { ...input, parameters, config: { ...input.config, training: { ...training, ...normalised } } };
}

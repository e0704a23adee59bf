import { Type } from '@sinclair/typebox';
import { MAX_WORKERS, MODEL_TYPES, PRIORITIES } from '../../training/config.ts';
import { JOB_STATUSES } from '../../training/service.ts';
import { ALGORITHMS } from '../../training/tuning/search-space.ts';
import { AnyObject, DateTime, Nullable } from '../accounts/common.ts';
import { MAX_INT32 } from '../bounds.ts';

const JobId = Type.String({ minLength: 1, maxLength: 64, pattern: '^job_[a-z0-9]+$' });
const Name = Type.String({ minLength: 1, maxLength: 100 });
const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 50 });
const FreeObject = Type.Object({}, { additionalProperties: true, maxProperties: 200 });
const Num = Nullable(Type.Number());
const Int = Nullable(Type.Integer());

export const JobParams = Type.Object({ job_id: JobId });

const TrainingSection = Type.Object(
  {
    epochs: Type.Optional(Type.Integer()),
    batch_size: Type.Optional(Type.Integer()),
    learning_rate: Type.Optional(Type.Number({ description: '1e-6 to 1e-1, else 400 CONFIGURATION_ERROR' })),
    weight_decay: Type.Optional(Type.Number()),
    warmup_steps: Type.Optional(Type.Integer()),
    gradient_accumulation_steps: Type.Optional(Type.Integer()),
  },
  { additionalProperties: true },
);

const JobConfig = Type.Object(
  {
    baseModel: Type.Optional(Type.String({ maxLength: 500 })),
    strategy: Type.Optional(Type.String({ maxLength: 100 })),
    parameters: Type.Optional(FreeObject),
    training: Type.Optional(TrainingSection),
    optimization: Type.Optional(FreeObject),
    image: Type.Optional(
      Type.String({ minLength: 1, maxLength: 512, description: 'Anvil: the trainer image' }),
    ),
    command: Type.Optional(
      Type.Array(Type.String({ maxLength: 4096 }), {
        maxItems: 100,
        description: "Anvil: overrides the image's CMD",
      }),
    ),
    gpusPerWorker: Type.Optional(Type.Integer({ description: 'Anvil: GPUs per worker, 1-16 (default 1)' })),
  },
  { additionalProperties: true, maxProperties: 100 },
);

/** Both creation forms in one object (the description says which fields each needs). */
export const CreateJobBody = Type.Object(
  {
    name: Name,
    // full form
    modelType: Type.Optional(Type.Union(MODEL_TYPES.map((t) => Type.Literal(t)))),
    datasetId: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    config: Type.Optional(JobConfig),
    description: Type.Optional(Type.String({ maxLength: 2000 })),
    tags: Type.Optional(Tags),
    gpuType: Type.Optional(
      Type.String({ minLength: 1, maxLength: 32, description: 'a100, h100, v100, rtx4090, t4' }),
    ),
    maxWorkers: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_WORKERS, default: 1 })),
    priority: Type.Optional(Type.Union(PRIORITIES.map((p) => Type.Literal(p)))),
    // short form
    framework: Type.Optional(Type.String({ maxLength: 50 })),
    modelConfig: Type.Optional(
      Type.Object(
        {
          modelType: Type.Optional(Type.String({ maxLength: 50 })),
          baseModel: Type.Optional(Type.String({ maxLength: 500 })),
          customCode: Type.Optional(Type.String({ maxLength: 262_144 })),
        },
        { additionalProperties: false },
      ),
    ),
    datasetConfig: Type.Optional(
      Type.Object(
        {
          datasetId: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
          datasetUrl: Type.Optional(Type.String({ maxLength: 2048 })),
          format: Type.Optional(Type.String({ maxLength: 32 })),
        },
        { additionalProperties: false },
      ),
    ),
    hyperparameters: Type.Optional(
      Type.Object(
        {
          learningRate: Type.Optional(Type.Number()),
          batchSize: Type.Optional(Type.Integer()),
          epochs: Type.Optional(Type.Integer()),
          optimizer: Type.Optional(Type.String({ maxLength: 50 })),
        },
        { additionalProperties: false },
      ),
    ),
    infrastructure: Type.Optional(
      Type.Object(
        {
          gpuType: Type.Optional(Type.String({ minLength: 1, maxLength: 32 })),
          gpuCount: Type.Optional(Type.Integer({ minimum: 1, maximum: 16 })),
          memory: Type.Optional(Type.Unknown()),
          storage: Type.Optional(Type.Unknown()),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const ListJobsQuery = Type.Object(
  {
    status: Type.Optional(Type.Union(JOB_STATUSES.map((s) => Type.Literal(s)))),
    modelType: Type.Optional(Type.Union(MODEL_TYPES.map((t) => Type.Literal(t)))),
    tuneId: Type.Optional(Type.String({ maxLength: 64 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
    sort: Type.Optional(
      Type.Union([Type.Literal('created_at'), Type.Literal('updated_at'), Type.Literal('name')], {
        default: 'created_at',
      }),
    ),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' })),
  },
  { additionalProperties: false },
);

export const StopJobBody = Type.Object(
  {
    saveCheckpoint: Type.Optional(Type.Boolean({ default: true })),
    reason: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);

export const ResumeJobBody = Type.Object(
  {
    checkpointId: Type.Optional(
      Type.String({ minLength: 1, maxLength: 64, description: 'default: the latest' }),
    ),
  },
  { additionalProperties: false },
);

const Progress = Type.Object({
  currentEpoch: Num,
  totalEpochs: Num,
  currentStep: Int,
  totalSteps: Int,
  percentage: Num,
  elapsedTime: Int,
  remainingTime: Int,
});

const listFields = {
  id: Type.String({ description: 'job_<id>' }),
  name: Type.String(),
  description: Nullable(Type.String()),
  status: Type.String({ description: JOB_STATUSES.join(', ') }),
  statusReason: Nullable(Type.String()),
  modelType: Type.String(),
  datasetId: Nullable(Type.String()),
  gpuType: Type.String(),
  maxWorkers: Type.Integer(),
  priority: Type.String(),
  tags: Type.Array(Type.String()),
  tuneId: Nullable(Type.String()),
  progress: Progress,
  createdAt: DateTime,
  updatedAt: DateTime,
  startedAt: Nullable(DateTime),
  completedAt: Nullable(DateTime),
};

export const JobListItem = Type.Object(
  { ...listFields, metrics: Type.Object({ loss: Num, learningRate: Num, throughput: Num }) },
  { $id: 'TrainingJobListItem' },
);

export const Checkpoint = Type.Object({
  id: Type.String({ description: 'ckpt_<id>' }),
  epoch: Num,
  step: Int,
  loss: Num,
  path: Type.String(),
  size: Int,
  createdAt: DateTime,
});

export const Job = Type.Object(
  {
    ...listFields,
    config: AnyObject,
    parameters: AnyObject,
    image: Type.String(),
    command: Type.Array(Type.String()),
    attempt: Type.Integer(),
    exitCode: Int,
    trialNumber: Int,
    resumedFrom: Nullable(Type.String()),
    preemptions: Type.Integer({
      description:
        'Times the job gave its GPUs to a queued job of higher priority (each an audit event and a training.preempted webhook event)',
    }),
    preemptedAt: Nullable(Type.String({ format: 'date-time' })),
    stopRequest: Nullable(
      Type.Object({
        saveCheckpoint: Type.Boolean(),
        reason: Nullable(Type.String()),
        requestedAt: Nullable(DateTime),
      }),
    ),
    resourceAllocation: Type.Object({
      gpuType: Type.String(),
      workers: Type.Integer(),
      gpusPerWorker: Type.Integer(),
      memoryPerWorker: Int,
      placement: Type.Array(
        Type.Object({ rank: Type.Integer(), hostId: Type.String(), gpuIndices: Type.Array(Type.Integer()) }),
      ),
    }),
    estimatedCost: Type.Object({ hourly: Num, total: Num }),
    metrics: Type.Object({
      currentLoss: Num,
      bestLoss: Num,
      learningRate: Num,
      throughput: Num,
      memoryUsage: Num,
    }),
    resourceUsage: Type.Object({ gpuHours: Num, cost: Num, efficiency: Num }),
    checkpoints: Type.Array(Checkpoint),
    estimatedCompletion: Nullable(DateTime),
  },
  { $id: 'TrainingJob' },
);

export const ShortCreatedJob = Type.Object({
  jobId: Type.String(),
  name: Type.String(),
  status: Type.String(),
  estimatedStartTime: Nullable(DateTime),
  estimatedDuration: Int,
  estimatedCost: Type.Object({ gpuCost: Num, storageCost: Num, totalCost: Num, hourly: Num }),
  createdAt: DateTime,
});

export const JobList = Type.Object({
  jobs: Type.Array(Type.Ref('TrainingJobListItem')),
  pagination: Type.Object({
    total: Type.Integer(),
    limit: Type.Integer(),
    offset: Type.Integer(),
    hasMore: Type.Boolean(),
  }),
});

// ---- tuning

const TuneId = Type.String({ minLength: 1, maxLength: 64, pattern: '^tune_[a-z0-9]+$' });
export const TuneParams = Type.Object({ job_id: JobId, tune_id: TuneId });

const Algorithm = Type.Union(ALGORITHMS.map((a) => Type.Literal(a)));

export const TuneBody = Type.Object(
  {
    objective: Type.Optional(Type.Union([Type.Literal('minimize'), Type.Literal('maximize')])),
    metric: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    search_space: Type.Optional(Type.Object({}, { additionalProperties: true, maxProperties: 50 })),
    algorithm: Type.Optional(Algorithm),
    max_trials: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 50 })),
    max_concurrent: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, default: 4 })),
    early_stopping: Type.Optional(
      Type.Object(
        {
          metric: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
          patience: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
          min_delta: Type.Optional(Type.Number({ minimum: 0 })),
        },
        { additionalProperties: false },
      ),
    ),
    budget: Type.Optional(
      Type.Object(
        {
          max_gpu_hours: Type.Optional(Type.Number({ minimum: 0 })),
          max_cost: Type.Optional(Type.Number({ minimum: 0 })),
        },
        { additionalProperties: false },
      ),
    ),
    hyperband_config: Type.Optional(
      Type.Object(
        {
          max_epochs: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
          reduction_factor: Type.Optional(Type.Integer({ minimum: 2, maximum: 10 })),
          min_epochs: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
        },
        { additionalProperties: false },
      ),
    ),
    // short form
    hyperparameters: Type.Optional(Type.Object({}, { additionalProperties: true, maxProperties: 20 })),
    searchStrategy: Type.Optional(Algorithm),
    maxTrials: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  },
  { additionalProperties: false },
);

export const TuneListQuery = Type.Object(
  {
    status: Type.Optional(
      Type.Union(
        ['pending', 'running', 'stopping', 'completed', 'failed', 'cancelled'].map((s) => Type.Literal(s)),
      ),
    ),
    algorithm: Type.Optional(Algorithm),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
  },
  { additionalProperties: false },
);

export const StopTuneBody = Type.Object(
  {
    reason: Type.Optional(Type.String({ maxLength: 500 })),
    complete_running_trials: Type.Optional(Type.Boolean({ default: false })),
  },
  { additionalProperties: false },
);

export const DeployBestBody = Type.Object(
  {
    name: Type.Optional(Name),
    epochs: Type.Optional(Type.Integer({ minimum: 1 })),
    use_best_trial: Type.Optional(
      Type.String({ minLength: 1, maxLength: 64, description: 'a trial (job) id' }),
    ),
    override_parameters: Type.Optional(FreeObject),
  },
  { additionalProperties: false },
);

const TuneProgress = Type.Object({
  completedTrials: Type.Integer(),
  totalTrials: Type.Integer(),
  runningTrials: Type.Integer(),
  bestValue: Num,
  percentage: Type.Number(),
});

const Trial = Type.Object({
  id: Type.String(),
  trialNumber: Type.Integer(),
  parameters: AnyObject,
  metrics: AnyObject,
  value: Num,
  status: Type.String(),
  duration: Int,
  cost: Num,
});

export const Tune = Type.Object(
  {
    id: Type.String({ description: 'tune_<id>' }),
    trainingJobId: Type.String(),
    status: Type.String({ description: 'pending, running, stopping, completed, failed, cancelled' }),
    statusReason: Nullable(Type.String()),
    algorithm: Type.String(),
    objective: Type.String(),
    metric: Type.String(),
    searchSpace: AnyObject,
    settings: AnyObject,
    progress: TuneProgress,
    bestTrial: Nullable(
      Type.Object({
        id: Type.String(),
        parameters: AnyObject,
        metrics: AnyObject,
        duration: Int,
        cost: Num,
        modelId: Nullable(Type.String()),
      }),
    ),
    results: Type.Object({
      totalTrials: Type.Integer(),
      completedTrials: Type.Integer(),
      failedTrials: Type.Integer(),
      bestValue: Num,
      baselineValue: Num,
      improvementOverBaseline: Num,
      totalDuration: Num,
      totalCost: Num,
    }),
    trials: Type.Array(Trial),
    convergenceAnalysis: Type.Object({
      converged: Type.Boolean(),
      convergenceEpoch: Int,
      remainingImprovement: Num,
      recommendation: Type.String(),
    }),
    recommendations: Type.Array(Type.String()),
    estimatedDuration: Int,
    estimatedCompletion: Nullable(DateTime),
    createdAt: DateTime,
    updatedAt: DateTime,
    completedAt: Nullable(DateTime),
  },
  { $id: 'TuningJob' },
);

export const ShortTuneCreated = Type.Object({
  tuningJobId: Type.String(),
  status: Type.String(),
  estimatedDuration: Int,
});

export const TuneList = Type.Object({
  tuningJobs: Type.Array(
    Type.Object({
      id: Type.String(),
      trainingJobId: Type.String(),
      status: Type.String(),
      algorithm: Type.String(),
      objective: Type.String(),
      metric: Type.String(),
      progress: TuneProgress,
      bestValue: Num,
      createdAt: DateTime,
      updatedAt: DateTime,
    }),
  ),
  pagination: Type.Object({
    total: Type.Integer(),
    limit: Type.Integer(),
    offset: Type.Integer(),
    hasMore: Type.Boolean(),
  }),
});

export const DeployedJob = Type.Object({
  ...Job.properties,
  sourceTrialId: Type.String({ description: 'the trial whose parameters were used' }),
  tuningJobId: Type.String(),
});

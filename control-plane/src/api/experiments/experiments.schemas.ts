import { Type } from '@sinclair/typebox';
import { EXPORT_SECTIONS } from '../../experiments/csv.ts';
import { MAX_COMPARE_METRICS, MAX_RUNS_PER_EXPERIMENT } from '../../experiments/service.ts';
import { AnyObject, DateTime, Nullable } from '../accounts/common.ts';
import { MAX_INT32 } from '../bounds.ts';

const ExperimentId = Type.String({ minLength: 1, maxLength: 64, pattern: '^exp_[a-z0-9]+$' });
const RunId = Type.String({ minLength: 1, maxLength: 64, pattern: '^run_[a-z0-9]+$' });
const JobId = Type.String({ minLength: 1, maxLength: 64, pattern: '^job_[a-z0-9]+$' });
const Name = Type.String({ minLength: 1, maxLength: 100 });
const Description = Type.String({ maxLength: 5000 });
const LongText = Type.String({ maxLength: 10_000 });
const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 50 });
const FreeObject = Type.Object({}, { additionalProperties: true, maxProperties: 200 });
const MetricName = Type.String({
  minLength: 1,
  maxLength: 64,
  pattern: '^[A-Za-z0-9_.\\-/]+$',
  description: 'A metric name as trainers report it (loss, accuracy, val_loss, ...)',
});
const Direction = Type.Union([Type.Literal('minimize'), Type.Literal('maximize')]);
const Count = Type.Integer({ minimum: 0 });
const ParameterValue = Type.Union([
  Type.String({ maxLength: 1000 }),
  Type.Number(),
  Type.Boolean(),
  Type.Null(),
]);

export const ExperimentParams = Type.Object({ experiment_id: ExperimentId });

const Baseline = Type.Object(
  {
    type: Type.Optional(
      Type.String({ maxLength: 64, description: 'e.g. model, previous_experiment, paper' }),
    ),
    name: Type.Optional(Type.String({ maxLength: 200 })),
    metrics: Type.Optional(
      Type.Record(Type.String({ minLength: 1, maxLength: 64 }), Type.Number(), { maxProperties: 50 }),
    ),
  },
  { additionalProperties: false },
);

export const CreateExperimentBody = Type.Object(
  {
    name: Name,
    description: Description,
    hypothesis: Type.Optional(LongText),
    tags: Type.Optional(Tags),
    metadata: Type.Optional(FreeObject),
    baseline: Type.Optional(Baseline),
    primaryMetric: Type.Optional(MetricName),
  },
  { additionalProperties: false },
);

export const UpdateExperimentBody = Type.Object(
  {
    name: Type.Optional(Name),
    description: Type.Optional(Description),
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('completed')])),
    conclusion: Type.Optional(Nullable(LongText)),
    tags: Type.Optional(Tags),
    metadata: Type.Optional(FreeObject),
    primaryMetric: Type.Optional(MetricName),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const ListQuery = Type.Object(
  {
    status: Type.Optional(
      Type.Union([Type.Literal('active'), Type.Literal('completed'), Type.Literal('archived')]),
    ),
    tags: Type.Optional(
      Type.String({
        maxLength: 1000,
        description: 'Comma list; an experiment matches when it has every tag',
      }),
    ),
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

export const AddRunBody = Type.Object(
  {
    trainingJobId: JobId,
    name: Type.Optional(Name),
    parameters: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 64 }), ParameterValue)),
    tags: Type.Optional(Tags),
    notes: Type.Optional(LongText),
  },
  { additionalProperties: false },
);

export const ArchiveBody = Type.Object(
  {
    reason: Type.Optional(Type.String({ maxLength: 1000 })),
    preserve_artifacts: Type.Optional(Type.Boolean({ default: true })),
  },
  { additionalProperties: false },
);

export const CloneBody = Type.Object(
  {
    name: Type.Optional(Name),
    description: Type.Optional(Description),
    modifications: Type.Optional(
      Type.Object(
        {
          hypothesis: Type.Optional(Nullable(LongText)),
          tags: Type.Optional(Tags),
          metadata: Type.Optional(FreeObject),
          baseline: Type.Optional(Nullable(Baseline)),
          primaryMetric: Type.Optional(MetricName),
        },
        { additionalProperties: false },
      ),
    ),
    copy_runs: Type.Optional(Type.Boolean({ default: false })),
  },
  { additionalProperties: false },
);

export const ExportBody = Type.Object(
  {
    format: Type.Optional(Type.Literal('csv', { default: 'csv' })),
    include: Type.Optional(
      Type.Array(Type.Union(EXPORT_SECTIONS.map((s) => Type.Literal(s))), { uniqueItems: true, maxItems: 4 }),
    ),
    destination: Type.Optional(
      Type.Object(
        {
          type: Type.String({
            minLength: 1,
            maxLength: 32,
            description: 'download (others: not configured)',
          }),
          bucket: Type.Optional(Type.String({ maxLength: 255 })),
          path: Type.Optional(Type.String({ maxLength: 1024 })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const CompareBody = Type.Object(
  {
    runs: Type.Optional(Type.Array(RunId, { minItems: 1, maxItems: MAX_RUNS_PER_EXPERIMENT })),
    metrics: Type.Optional(
      Type.Array(MetricName, { minItems: 1, maxItems: MAX_COMPARE_METRICS, uniqueItems: true }),
    ),
    analysis: Type.Optional(
      Type.Object(
        {
          statistical_tests: Type.Optional(Type.Boolean({ default: true })),
          correlation_analysis: Type.Optional(Type.Boolean({ default: true })),
          performance_pareto: Type.Optional(Type.Boolean({ default: true })),
        },
        { additionalProperties: false },
      ),
    ),
    directions: Type.Optional(
      Type.Record(MetricName, Direction, {
        maxProperties: MAX_COMPARE_METRICS,
        description: "Overrides a metric's direction (else the naming rule)",
      }),
    ),
  },
  { additionalProperties: false },
);

const Values = Type.Record(Type.String(), Type.Number());

export const Run = Type.Object(
  {
    id: Type.String({ description: 'run_<id>' }),
    experimentId: Type.String(),
    trainingJobId: Type.String(),
    name: Type.String(),
    status: Type.String({
      description:
        "The job's status (pending, queued, running, stopping, stopped, completed, failed, cancelled); deleted once the job is gone",
    }),
    parameters: AnyObject,
    metrics: Type.Object({ current: Values, best: Values, final: Nullable(Values) }),
    artifacts: Type.Array(
      Type.Object({
        id: Type.String(),
        type: Type.String(),
        name: Type.String(),
        path: Type.String(),
        sizeBytes: Type.Union([Type.Integer(), Type.Null()]),
        sha256: Type.Union([Type.String(), Type.Null()]),
        downloadUrl: Type.String(),
        createdAt: Type.String({ format: 'date-time' }),
      }),
    ),
    tags: Type.Array(Type.String()),
    notes: Nullable(Type.String()),
    cost: Nullable(Type.Number({ description: 'USD billed for the job so far' })),
    gpuHours: Nullable(Type.Number()),
    trainingTimeSeconds: Nullable(Count),
    startedAt: Nullable(DateTime),
    copiedFromRunId: Nullable(Type.String()),
    createdAt: DateTime,
    updatedAt: DateTime,
    completedAt: Nullable(DateTime),
  },
  { $id: 'ExperimentRun' },
);

const summaryFields = {
  id: Type.String({ description: 'exp_<id>' }),
  name: Type.String(),
  description: Type.String(),
  status: Type.String({ description: 'active, completed, archived' }),
  hypothesis: Nullable(Type.String()),
  tags: Type.Array(Type.String()),
  primaryMetric: Type.Object({ name: Type.String(), direction: Direction }),
  runCount: Count,
  clonedFrom: Nullable(Type.String()),
  createdAt: DateTime,
  updatedAt: DateTime,
  completedAt: Nullable(DateTime),
  archivedAt: Nullable(DateTime),
};

export const ExperimentSummary = Type.Object(summaryFields, { $id: 'ExperimentSummary' });

export const Experiment = Type.Object(
  {
    ...summaryFields,
    metadata: AnyObject,
    baseline: Nullable(AnyObject),
    conclusion: Nullable(Type.String()),
    archive: Nullable(
      Type.Object({
        reason: Nullable(Type.String()),
        preserveArtifacts: Type.Boolean(),
        archivedAt: DateTime,
      }),
    ),
    runs: Type.Array(Type.Ref('ExperimentRun')),
    statistics: Type.Object({
      total_runs: Count,
      completed_runs: Count,
      running_runs: Count,
      failed_runs: Count,
      best_metric: Nullable(Type.Number()),
      best_run: Nullable(Type.Object({ id: Type.String(), metric: Type.String(), value: Type.Number() })),
      total_cost: Nullable(Type.Number()),
      total_training_time: Nullable(Type.Number({ description: 'seconds' })),
      total_gpu_hours: Nullable(Type.Number()),
    }),
    insights: Type.Array(
      Type.Object({
        type: Type.String(),
        message: Type.String(),
        confidence: Nullable(Type.Number()),
        evidence: AnyObject,
        savings: Nullable(Type.Number({ description: 'USD' })),
        rule: Type.String(),
      }),
    ),
  },
  { $id: 'Experiment' },
);

export const ExperimentList = Type.Object({
  experiments: Type.Array(Type.Ref('ExperimentSummary')),
  pagination: Type.Object({ total: Count, limit: Count, offset: Count, hasMore: Type.Boolean() }),
});

export const ArchiveResult = Type.Object({
  id: Type.String(),
  name: Type.String(),
  status: Type.Literal('archived'),
  previousStatus: Nullable(Type.String({ description: 'null when it was archived already' })),
  archivedAt: DateTime,
  reason: Nullable(Type.String()),
  preserveArtifacts: Type.Boolean(),
  runs: Count,
  alreadyArchived: Type.Boolean(),
});

export const Comparison = Type.Object({
  experimentId: Type.String(),
  comparedAt: DateTime,
  metrics: Type.Array(Type.Object({ name: Type.String(), direction: Direction })),
  runs: Type.Array(Type.Ref('ExperimentRun')),
  excludedRuns: Type.Array(
    Type.Object({ runId: Type.String(), status: Type.String(), reason: Type.String() }),
  ),
  rankings: Type.Array(
    Type.Object({
      metric: Type.String(),
      direction: Direction,
      ranking: Type.Array(
        Type.Object({ rank: Count, runId: Type.String(), runName: Type.String(), value: Type.Number() }),
      ),
      missing: Type.Array(Type.String()),
    }),
  ),
  statistical_analysis: Nullable(
    Type.Object({
      alpha: Type.Number(),
      tests: Type.Array(
        Type.Object({
          metric: Type.String(),
          test: Type.Literal('welch_t'),
          runA: Type.String(),
          runB: Type.String(),
          meanA: Type.Number(),
          meanB: Type.Number(),
          nA: Count,
          nB: Count,
          t: Nullable(
            Type.Number({ description: 'null when infinite (both samples constant, means differ)' }),
          ),
          df: Type.Number(),
          pValue: Type.Number(),
          pValueHolm: Type.Number(),
          significant: Type.Boolean(),
        }),
      ),
      skipped: Type.Array(
        Type.Object({
          metric: Type.String(),
          runA: Type.String(),
          runB: Type.String(),
          reason: Type.String(),
        }),
      ),
    }),
  ),
  correlations: Nullable(
    Type.Array(
      Type.Object({
        parameter: Type.String(),
        metric: Type.String(),
        n: Count,
        pearson: Type.Object({ r: Type.Number(), pValue: Type.Number() }),
        spearman: Type.Object({
          rho: Type.Number(),
          pValue: Type.Number(),
          method: Type.Union([Type.Literal('exact'), Type.Literal('t_approximation')]),
        }),
      }),
    ),
  ),
  pareto_frontier: Nullable(
    Type.Array(Type.Object({ runId: Type.String(), reason: Type.String(), values: Values })),
  ),
  recommendations: Type.Array(
    Type.Object({
      type: Type.String(),
      message: Type.String(),
      rule: Type.String(),
      runId: Nullable(Type.String()),
    }),
  ),
});

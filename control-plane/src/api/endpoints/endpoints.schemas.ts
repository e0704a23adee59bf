import { Type } from '@sinclair/typebox';
import { GPU_TYPES } from '../../scheduler/gpu-types.ts';
import {
  MAX_EXECUTION_TIMEOUT_MS,
  MAX_TTL_MS,
  MIN_EXECUTION_TIMEOUT_MS,
  MIN_TTL_MS,
} from '../../serverless/jobs.ts';
import { ENDPOINT_STATUSES, JOB_STATUSES } from '../../serverless/states.ts';
import { AnyObject, DateTime, Nullable } from '../accounts/common.ts';
import { MAX_INT32 } from '../bounds.ts';

const EndpointId = Type.String({
  minLength: 1,
  maxLength: 64,
  pattern: '^ep_[a-z0-9]+$',
  description: 'ep_<id>',
});
const JobId = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9-]+$' });
const Count = Type.Integer({ minimum: 0 });
// Bounds are checked by the domain, so a value out of range answers the spec's 400 INVALID_CONFIGURATION
// {field, value, maximum|minimum} rather than a generic validation error.
const Int = (description: string) => Type.Integer({ description });

export const EndpointParams = Type.Object({ endpointId: EndpointId });
export const ExecParams = Type.Object({ endpoint_id: EndpointId });
export const JobParams = Type.Object({ endpoint_id: EndpointId, job_id: JobId });

const AutoScalingInput = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    minWorkers: Type.Optional(Int('0-50, default 0')),
    maxWorkers: Type.Optional(Int('1-50, default max(workerCount, 1)')),
    targetUtilization: Type.Optional(Int('Percent, 10-90, default 70')),
    scaleUpCooldown: Type.Optional(Int('Seconds, 0-3600, default 30')),
    scaleDownCooldown: Type.Optional(Int('Seconds, 0-86400, default 300')),
  },
  { additionalProperties: false },
);

const EnvVars = Type.Record(Type.String({ minLength: 1, maxLength: 256 }), Type.String(), {
  description: 'Names [A-Za-z_][A-Za-z0-9_]*, not starting with ANVIL_; at most 100, values up to 32 KB',
});

const WorkerProtocolSchema = Type.Union([Type.Literal('http'), Type.Literal('runpod')], {
  description:
    "Default http. The worker contract: `http`, Anvil's (the worker serves GET /health and POST /run on " +
    'workerPort; the control plane calls it through its agent); `runpod`, RunPod serverless worker images ' +
    "unchanged: RunPod's worker library pulls jobs (job-take long poll, job-done, stream, ping, job-stop) " +
    'from the URLs Anvil puts in RUNPOD_WEBHOOK_GET_JOB, RUNPOD_WEBHOOK_POST_OUTPUT, RUNPOD_WEBHOOK_POST_STREAM ' +
    'and RUNPOD_WEBHOOK_PING, served by the agent of its host and relayed to the control plane, with a token ' +
    'of that worker alone in RUNPOD_AI_API_KEY (void once the worker stops). A change replaces the workers.',
});

const configurationFields = {
  workerCount: Type.Optional(
    Int('1-50, default 1: the worker count while autoScaling is off, the initial one while on'),
  ),
  maxConcurrency: Type.Optional(Int('1-100, default 1: jobs one worker runs at once')),
  timeoutSeconds: Type.Optional(Int('10-3600, default 600: default executionTimeout of a job')),
  environmentVariables: Type.Optional(EnvVars),
  autoScaling: Type.Optional(AutoScalingInput),
  workerProtocol: Type.Optional(WorkerProtocolSchema),
};

export const ConfigurationInput = Type.Object(configurationFields, { additionalProperties: false });
export const UpdateEndpointBody = Type.Object(configurationFields, { additionalProperties: false });

export const CreateEndpointBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    templateId: Type.Optional(
      Type.String({ minLength: 1, maxLength: 64, description: 'tmpl_<id>: image, env and startup script' }),
    ),
    image: Type.Optional(
      Type.String({ minLength: 1, maxLength: 512, description: 'Worker image; required without templateId' }),
    ),
    command: Type.Optional(
      Type.Union([
        Type.String({ maxLength: 65_536, description: 'Run as sh -c <command>' }),
        Type.Array(Type.String({ maxLength: 65_536 }), { maxItems: 256, description: 'argv' }),
      ]),
    ),
    workerPort: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 65_535,
        description: 'Port the worker serves the contract on (default 8000)',
      }),
    ),
    gpuType: Type.Union(GPU_TYPES.map((t) => Type.Literal(t))),
    gpuCount: Type.Optional(Int('GPUs per worker, 1-8, default 1')),
    configuration: Type.Optional(ConfigurationInput),
  },
  { additionalProperties: false },
);

export const ListQuery = Type.Object(
  {
    status: Type.Optional(Type.Union(ENDPOINT_STATUSES.map((s) => Type.Literal(s)))),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
  },
  { additionalProperties: false },
);

const AutoScaling = Type.Object({
  enabled: Type.Boolean(),
  minWorkers: Count,
  maxWorkers: Count,
  targetUtilization: Count,
  scaleUpCooldown: Count,
  scaleDownCooldown: Count,
});

const Configuration = Type.Object({
  workerCount: Count,
  maxConcurrency: Count,
  timeoutSeconds: Count,
  environmentVariables: Type.Record(Type.String(), Type.String()),
  autoScaling: AutoScaling,
  workerProtocol: WorkerProtocolSchema,
});

export const EndpointRecord = Type.Object(
  {
    id: Type.String({ description: 'ep_<id>' }),
    name: Type.String(),
    status: Type.String({ description: 'pending, active, inactive, updating, error' }),
    statusReason: Nullable(Type.String()),
    url: Type.String({ description: '<ANVIL_PUBLIC_URL>/v2/<endpoint_id>/runsync' }),
    templateId: Nullable(Type.String()),
    image: Type.String(),
    gpuType: Type.String(),
    gpuCount: Count,
    workerPort: Count,
    createdAt: DateTime,
    updatedAt: DateTime,
    metrics: Type.Object({
      totalExecutions: Count,
      averageLatency: Nullable(Type.Integer({ description: 'ms' })),
      lastExecution: Nullable(DateTime),
    }),
    configuration: Configuration,
    workers: Type.Object({ target: Count, ready: Count, starting: Count, draining: Count }),
  },
  { $id: 'Endpoint' },
);

export const EndpointList = Type.Object({
  endpoints: Type.Array(Type.Ref('Endpoint')),
  pagination: Type.Object({ total: Count, limit: Count, offset: Count, hasMore: Type.Boolean() }),
});

export const UpdatedEndpoint = Type.Object({
  id: Type.String(),
  name: Type.String(),
  status: Type.Literal('updating'),
  configuration: Configuration,
  updatedAt: DateTime,
});

export const DeletedEndpoint = Type.Object({
  id: Type.String(),
  deleted: Type.Boolean(),
  deletedAt: DateTime,
  cancelledJobs: Count,
  workersStopping: Count,
});

export const HealthQuery = Type.Object(
  {
    check: Type.Optional(
      Type.Union([Type.Literal('basic'), Type.Literal('detailed'), Type.Literal('deep')], {
        default: 'basic',
      }),
    ),
    timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 30, default: 10, description: 'Seconds' })),
    include: Type.Optional(
      Type.String({
        maxLength: 100,
        pattern: '^((dependencies|resources|connectivity)(,(dependencies|resources|connectivity))*)?$',
        description: 'Comma list of dependencies, resources, connectivity',
      }),
    ),
  },
  { additionalProperties: false },
);

const Include = Type.Union([
  Type.Literal('dependencies'),
  Type.Literal('resources'),
  Type.Literal('connectivity'),
]);

export const BatchHealthBody = Type.Object(
  {
    endpointIds: Type.Array(EndpointId, { minItems: 1, maxItems: 50 }),
    check: Type.Optional(Type.Union([Type.Literal('basic'), Type.Literal('detailed'), Type.Literal('deep')])),
    include: Type.Optional(Type.Array(Include, { maxItems: 3 })),
    timeout: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 30, description: 'Seconds for the whole batch, default 10' }),
    ),
  },
  { additionalProperties: false },
);

export const HealthReport = Type.Object(
  {
    endpointId: Type.String(),
    status: Type.String({ description: 'healthy, degraded, unhealthy, starting, stopped, error' }),
    readiness: Type.String({ description: 'ready, not_ready, warming_up' }),
    lastChecked: DateTime,
    responseTime: Count,
    uptime: Nullable(Type.String()),
    version: Type.String(),
    issues: Type.Array(AnyObject),
    checks: Type.Object({ api: AnyObject, model: AnyObject, dependencies: Nullable(AnyObject) }),
    resources: Nullable(AnyObject),
    metrics: Type.Object({
      requestsLastHour: Count,
      averageLatency: Nullable(Type.Integer()),
      errorRate: Nullable(Type.Number()),
      successRate: Nullable(Type.Number()),
    }),
    startupProgress: Nullable(AnyObject),
    recoveryActions: Type.Array(AnyObject),
  },
  { $id: 'EndpointHealthReport' },
);

export const BatchHealth = Type.Object({
  reports: Type.Array(Type.Ref('EndpointHealthReport')),
  errors: Type.Array(
    Type.Object({ endpointId: Type.String(), error: Type.String(), message: Type.String(), code: Count }),
  ),
  summary: Type.Object({ total: Count, healthy: Count, degraded: Count, unhealthy: Count }),
});

export const ReadinessProbe = Type.Object({
  ready: Type.Boolean(),
  checks: Type.Array(
    Type.Object({ name: Type.String(), status: Type.String({ description: 'pass or fail' }) }),
  ),
  readinessGates: Type.Object({
    model: Type.Boolean(),
    resources: Type.Boolean(),
    dependencies: Type.Boolean(),
    networking: Type.Boolean(),
  }),
});

export const LivenessProbe = Type.Object({
  alive: Type.Boolean(),
  timestamp: DateTime,
  uptime: Nullable(Type.String()),
  version: Type.String(),
});

// ---- execution API

export const RunBody = Type.Object(
  {
    input: Type.Unknown({ description: 'Handed to the worker as is (POST /run {id, input})' }),
    webhook: Type.Optional(
      Type.String({ minLength: 1, maxLength: 2048, description: 'http(s) URL told of the final status' }),
    ),
    policy: Type.Optional(
      Type.Object(
        {
          executionTimeout: Type.Optional(
            Type.Integer({
              minimum: MIN_EXECUTION_TIMEOUT_MS,
              maximum: MAX_EXECUTION_TIMEOUT_MS,
              description: 'ms a worker may run the job; default the endpoint’s timeoutSeconds',
            }),
          ),
          ttl: Type.Optional(
            Type.Integer({
              minimum: MIN_TTL_MS,
              maximum: MAX_TTL_MS,
              description: 'ms the job lives from submission; default 24 h',
            }),
          ),
          lowPriority: Type.Optional(
            Type.Boolean({
              description:
                'RunPod’s: true (the job would not make the autoscaler add workers) is refused with 400 ' +
                'NOT_SUPPORTED, every queued job counts for scaling here; false is what every job does',
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    s3Config: Type.Optional(
      Type.Unknown({
        description:
          'RunPod’s bucket credentials for the worker: refused with 400 NOT_SUPPORTED (the worker contract ' +
          'hands a worker only {id, input}; pass storage settings in input or the endpoint’s environment)',
      }),
    ),
  },
  { additionalProperties: false },
);

export const StatusQuery = Type.Object(
  {
    ttl: Type.Optional(
      Type.String({
        description:
          'RunPod’s way to set a job’s ttl while reading it: refused with 400 NOT_SUPPORTED (set policy.ttl on /run)',
      }),
    ),
  },
  { additionalProperties: false },
);

export const RunSyncQuery = Type.Object(
  {
    wait: Type.Optional(
      Type.Integer({ minimum: 0, maximum: 300_000, description: 'ms to wait, default 90000' }),
    ),
  },
  { additionalProperties: false },
);

export const StreamQuery = Type.Object(
  {
    offset: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_INT32,
        description: 'Chunks after this seq; cursor untouched',
      }),
    ),
    wait: Type.Optional(
      Type.Integer({ minimum: 0, maximum: 60_000, description: 'ms to wait for a chunk, default 5000' }),
    ),
  },
  { additionalProperties: false },
);

const JobStatusText = Type.String({ description: JOB_STATUSES.join(', ') });

export const JobAccepted = Type.Object({ id: Type.String(), status: JobStatusText });

export const JobStatusRecord = Type.Object(
  {
    id: Type.String(),
    status: JobStatusText,
    delayTime: Nullable(Type.Integer({ description: 'ms from queued to started (to now while queued)' })),
    executionTime: Nullable(
      Type.Integer({ description: 'ms from started to completed (to now while running)' }),
    ),
    output: Type.Unknown(),
    error: Nullable(Type.String()),
    workerId: Nullable(Type.String()),
    retries: Count,
    attempts: Type.Integer({
      minimum: 0,
      description:
        'How many times a worker was handed this job since it was queued (or last retried). Above 1 when it ' +
        'was handed out again after the control-plane process running it stopped (killed, lease expired): ' +
        'delivery is at least once, so a handler that is not idempotent may have run that many times.',
    }),
    createdAt: DateTime,
    startedAt: Nullable(DateTime),
    completedAt: Nullable(DateTime),
    expiresAt: DateTime,
  },
  { $id: 'EndpointJob' },
);

export const StreamRecord = Type.Object({
  id: Type.String(),
  status: Type.String(),
  stream: Type.Array(Type.Object({ output: Type.Unknown(), seq: Count })),
  streamCount: Count,
  error: Nullable(Type.String()),
});

export const PurgeResult = Type.Object({ removed: Count, status: Type.Literal('completed') });

export const QueueHealth = Type.Object({
  jobs: Type.Object({
    inQueue: Count,
    inProgress: Count,
    completed: Count,
    failed: Count,
    cancelled: Count,
    timedOut: Count,
    retried: Count,
  }),
  workers: Type.Object({
    idle: Count,
    running: Count,
    ready: Count,
    initializing: Count,
    draining: Count,
    unhealthy: Count,
    throttled: Count,
  }),
});

import { type TSchema, Type } from '@sinclair/typebox';
import { CUSTOM_NAME_PATTERN, METRIC_NAMES_HELP } from '../../cluster-telemetry/catalogue.ts';
import { MAX_INT32 } from '../bounds.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const Num = Nullable(Type.Number());
const PerGpu = <T extends TSchema>(schema: T, description: string) =>
  Type.Record(Type.String(), schema, { description: `${description}; keyed by GPU id (gpu_0, gpu_1, ...)` });
const Time = Type.String({ description: 'ISO 8601 date-time' });

export const ClusterParams = Type.Object({ cluster_id: Type.String({ minLength: 1, maxLength: 64 }) });

const MetricsList = Type.Union([Type.Array(Type.String()), Type.String()], {
  description: `Repeated or comma-separated: ${METRIC_NAMES_HELP}. Default: every measured metric.`,
});
const GpuId = Type.String({
  description: 'gpu_<n> (n = position in the cluster, 0-based), the plain number, or the GPU UUID',
});

// ---- snapshot

export const SnapshotQuery = Type.Object({
  metrics: Type.Optional(MetricsList),
  gpu_id: Type.Optional(GpuId),
  include_processes: Type.Optional(Type.Boolean({ default: false })),
  include_temperature: Type.Optional(Type.Boolean({ default: true })),
  include_power: Type.Optional(Type.Boolean({ default: true })),
  include_custom: Type.Optional(Type.Boolean({ default: true })),
});

const GpuSection = Type.Object({
  utilization: PerGpu(Num, 'Percent busy'),
  memory: PerGpu(
    Type.Object({ used: Num, total: Num, utilization_percent: Num }),
    'Bytes; utilization_percent = used / total × 100',
  ),
  temperature: Type.Optional(PerGpu(Num, 'Celsius')),
  power: Type.Optional(PerGpu(Num, 'Watts')),
  clock_speeds: PerGpu(Type.Object({ graphics_clock: Num, memory_clock: Num }), 'MHz'),
});

const CpuSection = Type.Object({
  utilization: Num,
  load_avg: Nullable(Type.Array(Type.Number())),
  memory_used: Num,
  memory_total: Num,
  cores: Type.Integer(),
  threads: Num,
});

const StorageSection = Type.Object({
  disk_used: Num,
  disk_total: Num,
  utilization_percent: Num,
  io_stats: Type.Object({
    read_bytes_per_sec: Num,
    write_bytes_per_sec: Num,
    read_ops_per_sec: Num,
    write_ops_per_sec: Num,
  }),
});

const NetworkSection = Type.Object({
  bytes_sent: Num,
  bytes_received: Num,
  packets_sent: Num,
  packets_received: Num,
  interfaces: Type.Array(
    Type.Object({
      name: Type.String(),
      bytes_sent: Num,
      bytes_received: Num,
      speed_mbps: Num,
      status: Nullable(Type.String()),
    }),
  ),
});

const Process = Type.Object({
  pid: Type.Integer(),
  name: Nullable(Type.String()),
  command: Nullable(Type.String()),
  cpu_percent: Num,
  memory_bytes: Num,
  gpu_memory_usage: Num,
  gpu_utilization: Num,
  user: Nullable(Type.String()),
  runtime_seconds: Num,
  gpu_id: Type.String(),
});

export const Snapshot = Type.Object({
  cluster_id: Type.String(),
  timestamp: Nullable(Time),
  gpu: Type.Optional(GpuSection),
  cpu: Type.Optional(CpuSection),
  storage: Type.Optional(StorageSection),
  network: Type.Optional(NetworkSection),
  processes: Type.Optional(Type.Array(Process)),
  custom_metrics: Type.Optional(Type.Record(Type.String(), Type.Number())),
});

export const SnapshotMeta = {
  collection_time_ms: Num,
  metrics_version: Type.String(),
};

// ---- history and statistics

export const HistoryQuery = Type.Object({
  start_time: Type.Optional(Type.String({ description: 'Required, ISO 8601' })),
  end_time: Type.Optional(Type.String({ description: 'Required, ISO 8601, after start_time' })),
  interval: Type.Optional(Type.String({ description: '1m, 5m (default), 15m, 1h, 6h, 1d' })),
  aggregation: Type.Optional(Type.String({ description: 'avg (default), min, max, sum' })),
  metrics: Type.Optional(MetricsList),
  gpu_id: Type.Optional(GpuId),
});

export const History = Type.Object({
  cluster_id: Type.String(),
  start_time: Time,
  end_time: Time,
  interval: Type.String(),
  aggregation: Type.String(),
  resolution: Type.String({ description: 'raw (samples) or rollup (one-minute rollups)' }),
  metrics: Type.Array(Type.String(), { description: 'The metrics asked for (custom ones when named)' }),
  data_points: Type.Array(
    Type.Object({
      timestamp: Type.String({
        description: 'Start of the interval (intervals are aligned to the Unix epoch, UTC)',
      }),
      metric: Type.String(),
      gpu_id: Nullable(Type.String()),
      value: Num,
      samples: Type.Integer({ description: 'Samples that fell in the interval' }),
    }),
  ),
});

export const AggregateQuery = Type.Object({
  window: Type.Optional(
    Type.String({ description: '5m, 15m, 1h (default), 6h, 24h, 7d, 30d: ending at end_time or now' }),
  ),
  start_time: Type.Optional(Type.String({ description: 'Instead of window: ISO 8601' })),
  end_time: Type.Optional(Type.String({ description: 'ISO 8601, default now' })),
  metrics: Type.Optional(MetricsList),
  gpu_id: Type.Optional(GpuId),
});

export const Aggregate = Type.Object({
  cluster_id: Type.String(),
  window: Nullable(Type.String()),
  start_time: Time,
  end_time: Time,
  resolution: Type.String({ description: 'raw or rollup' }),
  metrics: Type.Array(
    Type.Object({
      metric: Type.String(),
      gpu_id: Nullable(Type.String()),
      unit: Nullable(Type.String()),
      count: Type.Integer(),
      min: Num,
      max: Num,
      avg: Num,
      p50: Num,
      p95: Num,
      last: Num,
    }),
  ),
});

// ---- custom metrics

export const CustomMetricBody = Type.Object(
  {
    name: Type.String({
      pattern: CUSTOM_NAME_PATTERN,
      description: 'Letters, digits, _ . : -; 1-100 characters',
    }),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    type: Type.Optional(Type.Union([Type.Literal('gauge'), Type.Literal('counter')], { default: 'gauge' })),
    unit: Type.Optional(Type.String({ maxLength: 32 })),
    tags: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 20 })),
    value: Type.Number(),
    timestamp: Type.Optional(Type.String({ description: 'ISO 8601; default: when received' })),
  },
  { additionalProperties: false },
);

export const CustomMetric = Type.Object({
  id: Type.String(),
  cluster_id: Type.String(),
  name: Type.String(),
  description: Nullable(Type.String()),
  type: Type.String(),
  unit: Nullable(Type.String()),
  tags: Type.Array(Type.String()),
  value: Type.Number(),
  timestamp: Time,
  received_at: Time,
});

// ---- logs

export const LogEntry = Type.Object(
  {
    id: Type.String({ description: 'Sequence number of the line; also the SSE event id' }),
    timestamp: Time,
    level: Type.String(),
    source: Type.String(),
    log_type: Type.String(),
    message: Type.String(),
    process: Nullable(
      Type.Object({ pid: Num, name: Nullable(Type.String()), command: Nullable(Type.String()) }),
    ),
    metadata: Type.Object({
      host: Type.String(),
      container_id: Type.String(),
      stream: Type.String(),
      docker_timestamp: Type.String(),
      thread_id: Nullable(Type.String()),
      file: Nullable(Type.String()),
      line: Num,
      gpu_id: Nullable(Type.String()),
      cuda_version: Nullable(Type.String()),
      driver_version: Nullable(Type.String()),
    }),
    tags: Type.Array(Type.String()),
    stack_trace: Nullable(Type.Array(Type.String())),
  },
  { $id: 'ClusterLogEntry' },
);

const Pagination = Type.Object({
  total_count: Type.Integer(),
  current_page: Type.Integer(),
  total_pages: Type.Integer(),
  has_next: Type.Boolean(),
  has_previous: Type.Boolean(),
});

const QueryInfo = Type.Object({
  log_type: Nullable(Type.String()),
  time_range: Type.Object({ start: Nullable(Time), end: Nullable(Time) }),
  filters_applied: Type.Array(Type.String()),
  search_terms: Type.Array(Type.String()),
  query: Type.Optional(Type.String()),
  sort: Type.Optional(Type.String()),
});

export const LogsQuery = Type.Object({
  log_type: Type.Optional(Type.String({ description: 'system, application, error, audit, docker, gpu' })),
  level: Type.Optional(
    Type.Union([Type.Array(Type.String()), Type.String()], {
      description: 'debug, info, warn, error, fatal; repeated or comma-separated for several',
    }),
  ),
  start_time: Type.Optional(Type.String({ description: 'ISO 8601, inclusive' })),
  end_time: Type.Optional(Type.String({ description: 'ISO 8601, inclusive' })),
  // Only the column's bounds here: the handler checks the range and names each bad parameter (INVALID_PARAMETERS).
  limit: Type.Optional(
    Type.Integer({ minimum: -MAX_INT32, maximum: MAX_INT32, description: '1-1000, default 100' }),
  ),
  offset: Type.Optional(Type.Integer({ minimum: -MAX_INT32, maximum: MAX_INT32, description: 'Default 0' })),
  search: Type.Optional(
    Type.String({ maxLength: 500, description: 'Case-insensitive substring of the message' }),
  ),
  source: Type.Optional(Type.String({ description: 'container, host, gpu_driver, application' })),
  format: Type.Optional(Type.Union([Type.Literal('json'), Type.Literal('text')], { default: 'json' })),
  tail: Type.Optional(Type.Boolean({ default: true })),
});

export const LogsData = Type.Object({
  cluster_id: Type.String(),
  logs: Type.Array(Type.Ref('ClusterLogEntry')),
  pagination: Pagination,
  query_info: QueryInfo,
});

export const LogsMeta = { query_time_ms: Type.Number(), log_retention_days: Type.Number() };

export const SearchBody = Type.Object(
  {
    query: Type.String({ minLength: 1, maxLength: 2000 }),
    time_range: Type.Optional(
      Type.Object(
        { start: Type.Optional(Type.String()), end: Type.Optional(Type.String()) },
        { additionalProperties: false },
      ),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
    sort: Type.Optional(
      Type.String({ maxLength: 40, description: 'timestamp:desc (default) or timestamp:asc' }),
    ),
  },
  { additionalProperties: false },
);

export const SearchData = Type.Object({
  cluster_id: Type.String(),
  logs: Type.Array(Type.Ref('ClusterLogEntry')),
  total_matches: Type.Integer(),
  pagination: Pagination,
  query_info: QueryInfo,
});

export const StreamQuery = Type.Object({
  follow: Type.Optional(Type.Boolean({ default: true })),
  tail: Type.Optional(Type.Integer({ minimum: 0, maximum: 1000, default: 100 })),
  level: LogsQuery.properties.level,
  search: LogsQuery.properties.search,
  last_event_id: Type.Optional(
    Type.String({ pattern: '^[0-9]{1,18}$', description: 'As the Last-Event-ID header' }),
  ),
});

export const DownloadQuery = Type.Object({
  format: Type.Optional(
    Type.Union([Type.Literal('json'), Type.Literal('text')], {
      default: 'json',
      description: 'json: one JSON log entry per line (JSON Lines); text: one formatted line per entry',
    }),
  ),
  compression: Type.Optional(Type.Literal('gzip', { default: 'gzip' })),
  start_time: Type.Optional(Type.String({ description: 'ISO 8601, inclusive' })),
  end_time: Type.Optional(Type.String({ description: 'ISO 8601, inclusive' })),
  level: LogsQuery.properties.level,
});

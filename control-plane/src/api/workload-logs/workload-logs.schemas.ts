import { Type } from '@sinclair/typebox';
import { MAX_INT32 } from '../bounds.ts';
import {
  LogEntry,
  LogsQuery,
  SearchBody,
  StreamQuery,
} from '../cluster-telemetry/cluster-telemetry.schemas.ts';

/** The cluster log entry's shape, without its $id (that schema is the cluster area's). */
export const WorkerLogEntry = Type.Object({ ...LogEntry.properties });

const Pagination = Type.Object({
  total_count: Type.Integer(),
  current_page: Type.Integer(),
  total_pages: Type.Integer(),
  has_next: Type.Boolean(),
  has_previous: Type.Boolean(),
});

const QueryInfo = Type.Object({}, { additionalProperties: true });

export const TrainingLogsParams = Type.Object({ job_id: Type.String({ maxLength: 64 }) });
export const WorkerLogsParams = Type.Object({
  endpointId: Type.String({ maxLength: 64 }),
  workerId: Type.String({ maxLength: 64 }),
});
export const WorkersParams = Type.Object({ endpointId: Type.String({ maxLength: 64 }) });

const Rank = {
  rank: Type.Optional(
    Type.Integer({ minimum: 0, maximum: MAX_INT32, description: 'The worker (0..maxWorkers-1); default 0' }),
  ),
  attempt: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: MAX_INT32,
      description: "The job's run (1 = first; default the current one)",
    }),
  ),
};

const Follow = {
  follow: Type.Optional(
    Type.Boolean({
      default: false,
      description: 'true: Server-Sent Events, the newest `limit` lines then new ones as they come',
    }),
  ),
  last_event_id: StreamQuery.properties.last_event_id,
};

export const WorkerLogsQuery = Type.Object({ ...LogsQuery.properties, ...Follow });
export const TrainingLogsQuery = Type.Object({ ...LogsQuery.properties, ...Rank, ...Follow });
export const TrainingSearchBody = Type.Object(
  { ...SearchBody.properties, ...Rank },
  { additionalProperties: false },
);
export const WorkerSearchBody = SearchBody;

const page = {
  workloadId: Type.String({ description: "The worker's container (workload) whose lines these are" }),
  logs: Type.Array(WorkerLogEntry),
  pagination: Pagination,
  query_info: QueryInfo,
  log_retention_days: Type.Number(),
};

export const TrainingLogsPage = Type.Object({
  jobId: Type.String(),
  rank: Type.Integer(),
  attempt: Type.Integer(),
  ...page,
  total_matches: Type.Optional(Type.Integer()),
});

export const WorkerLogsPage = Type.Object({
  endpointId: Type.String(),
  workerId: Type.String(),
  ...page,
  total_matches: Type.Optional(Type.Integer()),
});

export const WorkerList = Type.Object({
  endpointId: Type.String(),
  workers: Type.Array(
    Type.Object({
      id: Type.String(),
      status: Type.String(),
      statusReason: Type.Union([Type.String(), Type.Null()]),
      createdAt: Type.String({ format: 'date-time' }),
      readyAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
      stoppedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
      logsUrl: Type.String(),
    }),
  ),
});

import { type Static, Type } from '@sinclair/typebox';
import { Nullable, WorkloadId } from './common.ts';

export const LogEntry = Type.Object({
  workloadId: WorkloadId,
  containerId: Type.String(),
  stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]),
  /** Docker's timestamp, RFC 3339 with exactly nine fractional digits so strings sort in time order. */
  ts: Type.String(),
  line: Type.String(),
});
export type LogEntry = Static<typeof LogEntry>;

/** What the agent could not keep while its buffer was full: counted, never silently lost. */
export const LogLoss = Type.Object({
  workloadId: Nullable(WorkloadId),
  containerId: Nullable(Type.String()),
  lines: Type.Integer({ minimum: 0 }),
  bytes: Type.Integer({ minimum: 0 }),
  /** Timestamps of the first and last dropped lines. */
  firstTs: Nullable(Type.String()),
  lastTs: Nullable(Type.String()),
});
export type LogLoss = Static<typeof LogLoss>;

/**
 * A container whose logs the agent has sent in full: its follower ended after the container stopped and
 * every line it read went out in this log_batch or an earlier one on the same connection.
 */
export const LogsComplete = Type.Object({
  workloadId: WorkloadId,
  containerId: Type.String(),
});
export type LogsComplete = Static<typeof LogsComplete>;

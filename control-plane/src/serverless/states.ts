/**
 * Job statuses and the moves between them (RunPod's job model). Every statement that changes a job's
 * status takes its `from` list here, so the SQL cannot allow a move this table does not.
 */
export const JOB_STATUSES = [
  'IN_QUEUE',
  'IN_PROGRESS',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'TIMED_OUT',
] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

export const FINAL_STATUSES: readonly JobStatus[] = ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'];

export function isFinal(status: string): boolean {
  return (FINAL_STATUSES as readonly string[]).includes(status);
}

/** What moves a job. */
export type JobTrigger =
  /** A worker with a free slot took it (dispatcher). */
  | 'claim'
  /** The worker answered {output} (or a stream that ended without error). */
  | 'complete'
  /** The worker answered {error}, a non-2xx status, or bad JSON; or it was lost too often. */
  | 'fail'
  /** policy.executionTimeout passed while running, or ttl passed. */
  | 'timeout'
  /** POST /cancel, POST /purge-queue, or the endpoint was deleted. */
  | 'cancel'
  /** The worker or the replica running it went away before an answer: back to the queue. */
  | 'requeue'
  /** POST /retry. */
  | 'retry';

const MOVES: Record<JobTrigger, { from: readonly JobStatus[]; to: JobStatus }> = {
  claim: { from: ['IN_QUEUE'], to: 'IN_PROGRESS' },
  complete: { from: ['IN_PROGRESS'], to: 'COMPLETED' },
  fail: { from: ['IN_PROGRESS'], to: 'FAILED' },
  timeout: { from: ['IN_QUEUE', 'IN_PROGRESS'], to: 'TIMED_OUT' },
  cancel: { from: ['IN_QUEUE', 'IN_PROGRESS'], to: 'CANCELLED' },
  requeue: { from: ['IN_PROGRESS'], to: 'IN_QUEUE' },
  retry: { from: ['FAILED', 'TIMED_OUT'], to: 'IN_QUEUE' },
};

export function move(trigger: JobTrigger): { from: readonly JobStatus[]; to: JobStatus } {
  return MOVES[trigger];
}

/** The status a job in `from` takes on `trigger`, or null when the move is not allowed. */
export function next(from: string, trigger: JobTrigger): JobStatus | null {
  const m = MOVES[trigger];
  return (m.from as readonly string[]).includes(from) ? m.to : null;
}

/** Endpoint statuses (spec), plus `updating` after PUT until the new configuration is applied. */
export const ENDPOINT_STATUSES = ['pending', 'active', 'inactive', 'updating', 'error'] as const;
export type EndpointStatus = (typeof ENDPOINT_STATUSES)[number];

/** Worker statuses: starting → ready → draining → stopped, or failed / lost (host unreachable). */
export const WORKER_STATUSES = ['starting', 'ready', 'draining', 'stopped', 'failed', 'lost'] as const;
export type WorkerStatus = (typeof WORKER_STATUSES)[number];
/** Workers that still hold a container (and GPUs). */
export const LIVE_WORKER_STATUSES: readonly WorkerStatus[] = ['starting', 'ready', 'draining'];

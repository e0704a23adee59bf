import type { EndpointJob } from '../db/generated/client.ts';

/**
 * endpoint_jobs rows read with raw SQL on the job's hot path (submit, claim, finish: one prepared
 * statement each instead of Prisma's several round trips), in the shape Prisma gives the rest of the code.
 */
const COLUMNS: Record<keyof EndpointJob, string> = {
  id: 'id',
  endpointId: 'endpoint_id',
  accountId: 'account_id',
  userId: 'user_id',
  keyId: 'key_id',
  status: 'status',
  input: 'input',
  output: 'output',
  error: 'error',
  executionTimeoutMs: 'execution_timeout_ms',
  ttlMs: 'ttl_ms',
  expiresAt: 'expires_at',
  workerId: 'worker_id',
  attempts: 'attempts',
  retries: 'retries',
  leaseUntil: 'lease_until',
  dispatchedBy: 'dispatched_by',
  streamCount: 'stream_count',
  streamRead: 'stream_read',
  webhook: 'webhook',
  webhookStatus: 'webhook_status',
  webhookAttempts: 'webhook_attempts',
  webhookNextAt: 'webhook_next_at',
  webhookError: 'webhook_error',
  queuedAt: 'queued_at',
  startedAt: 'started_at',
  completedAt: 'completed_at',
  createdAt: 'created_at',
  updatedAt: 'updated_at',
};

/** The select list of a job row from table alias `alias`, each column under its model name. */
export function jobColumns(alias: string): string {
  return Object.entries(COLUMNS)
    .map(([field, column]) => `${alias}.${column} AS "${field}"`)
    .join(', ');
}

/** A row selected with jobColumns(): ttl_ms as Prisma's BigInt (drivers answer int8 as text or number). */
export function jobFromRow(row: Record<string, unknown>): EndpointJob {
  const job = row as unknown as EndpointJob & { ttlMs: bigint | string | number };
  return { ...job, ttlMs: BigInt(job.ttlMs) };
}

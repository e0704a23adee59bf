import { randomUUID } from 'node:crypto';
import { ApiError, newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import { type Endpoint, type EndpointJob, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { TX_OPTIONS } from '../scheduler/allocator.ts';
import { jobColumns, jobFromRow } from './job-rows.ts';
import { isFinal, type JobStatus, type JobTrigger, move } from './states.ts';

type Tx = Prisma.TransactionClient;

/** RunPod's defaults: a job lives 24 h (ttl) and runs at most the endpoint's timeout (executionTimeout). */
export const DEFAULT_TTL_MS = 86_400_000;
export const MIN_TTL_MS = 10_000;
export const MAX_TTL_MS = 7 * 86_400_000;
export const MIN_EXECUTION_TIMEOUT_MS = 5_000;
export const MAX_EXECUTION_TIMEOUT_MS = 86_400_000;
/** A job whose worker went away this many times fails rather than being queued again. */
export const MAX_ATTEMPTS = 3;
/** Finished jobs are kept this long for statistics (metrics over 30 days), then deleted. */
export const JOB_RETENTION_MS = 31 * 86_400_000;

export interface SubmitInput {
  input: unknown;
  webhook?: string | undefined;
  policy?: { executionTimeout?: number | undefined; ttl?: number | undefined } | undefined;
}

export interface Submitter {
  accountId: string;
  userId: string | null;
  keyId: string | null;
}

export interface JobOutcome {
  status: Extract<JobStatus, 'COMPLETED' | 'FAILED' | 'TIMED_OUT'>;
  output?: unknown;
  error?: string | null;
}

const json = (value: unknown) =>
  value === undefined || value === null ? Prisma.DbNull : (value as Prisma.InputJsonValue);

function jobNotFound(endpointId: string, jobId: string, reason?: string): ApiError {
  return new ApiError(
    'JOB_NOT_FOUND',
    `no job ${jobId} on endpoint ${endpointId}${reason ? ` (${reason})` : ''}`,
    {
      endpointId,
      jobId,
      ...(reason ? { reason } : {}),
    },
  );
}

/** `status IN ('A', 'B')` for the `from` list of a move. */
function fromList(trigger: JobTrigger): string {
  return move(trigger)
    .from.map((s) => `'${s}'`)
    .join(', ');
}

/**
 * The durable job queue: one row per request in endpoint_jobs. Replicas claim queued jobs with
 * `FOR UPDATE SKIP LOCKED` under a lock of the worker's row, so two replicas never give one job to two
 * workers nor a worker more jobs than its free slots (maxConcurrency). Every status change names the
 * statuses it may come from (states.ts), so a late answer cannot overwrite a cancel or a timeout.
 */
export class JobQueue {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async submit(endpoint: Endpoint, by: Submitter, input: SubmitInput): Promise<EndpointJob> {
    const now = this.clock.now();
    const ttl = input.policy?.ttl ?? DEFAULT_TTL_MS;
    const executionTimeout = input.policy?.executionTimeout ?? endpoint.timeoutSeconds * 1000;
    const [row] = await this.db.sql.query(
      `INSERT INTO endpoint_jobs (id, endpoint_id, account_id, user_id, key_id, status, input,
              execution_timeout_ms, ttl_ms, expires_at, webhook, queued_at, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 'IN_QUEUE', $6::jsonb, $7, $8, $9, $10, $11, $11, $11)
       RETURNING ${jobColumns('endpoint_jobs')}`,
      [
        randomUUID(),
        endpoint.id,
        endpoint.accountId,
        by.userId,
        by.keyId,
        input.input === undefined || input.input === null ? null : JSON.stringify(input.input),
        executionTimeout,
        ttl,
        new Date(now.getTime() + ttl),
        input.webhook ?? null,
        now,
      ],
      'endpoint_jobs_submit',
    );
    return jobFromRow(row!);
  }

  /** The job, or 404 JOB_NOT_FOUND (another endpoint's, unknown, or past its ttl). */
  async find(endpointId: string, jobId: string): Promise<EndpointJob> {
    const row = await this.db.prisma.endpointJob.findFirst({ where: { id: jobId, endpointId } });
    if (!row) throw jobNotFound(endpointId, jobId);
    if (row.expiresAt.getTime() <= this.clock.now().getTime() && isFinal(row.status))
      throw jobNotFound(endpointId, jobId, 'expired: its ttl passed');
    return row;
  }

  async get(jobId: string): Promise<EndpointJob | null> {
    return this.db.prisma.endpointJob.findUnique({ where: { id: jobId } });
  }

  /**
   * Gives worker `workerId` up to its free slots of the endpoint's oldest queued jobs, IN_PROGRESS with
   * a lease held by `replicaId`, in one round trip (anvil_claim_endpoint_jobs, migration
   * 20261129000100): the worker's row lock orders claimers; the count of its running jobs is read after
   * the lock (a new statement, so a fresh snapshot), and the jobs are taken SKIP LOCKED.
   */
  async claim(
    worker: { id: string; endpointId: string; maxConcurrency: number },
    replicaId: string,
    leaseMs: number,
    /** At most this many (a RunPod worker's batch), within its free slots. */
    limit?: number,
  ): Promise<EndpointJob[]> {
    const now = this.clock.now();
    const claim = move('claim');
    const rows = await this.db.sql.query(
      `SELECT ${jobColumns('c')}
         FROM anvil_claim_endpoint_jobs($1, $2, $3, $4, $5, $6, $7, $8::text[], $9) c
        ORDER BY c.queued_at, c.id`,
      [
        worker.id,
        worker.endpointId,
        worker.maxConcurrency,
        limit ?? null,
        now,
        replicaId,
        new Date(now.getTime() + leaseMs),
        claim.from,
        claim.to,
      ],
      'endpoint_jobs_claim',
    );
    return rows.map(jobFromRow);
  }

  /**
   * Extends the leases of jobs this replica runs; returns the ids still IN_PROGRESS under this replica
   * (a job missing from the answer was cancelled, timed out or taken back: its request is aborted).
   */
  async renew(jobIds: string[], replicaId: string, leaseMs: number): Promise<Set<string>> {
    if (jobIds.length === 0) return new Set();
    const now = this.clock.now();
    const rows = await this.db.sql.query<{ id: string }>(
      `UPDATE endpoint_jobs SET lease_until = $3, updated_at = $4
        WHERE id = ANY($1::text[]) AND status = 'IN_PROGRESS' AND dispatched_by = $2
        RETURNING id`,
      [jobIds, replicaId, new Date(now.getTime() + leaseMs), now],
    );
    return new Set(rows.map((r) => r.id));
  }

  /**
   * The worker's answer: COMPLETED, FAILED or TIMED_OUT, only while the job is still this worker's and in
   * progress. Writes the execution's usage record (kind execution, GPU hours = run time × gpuCount, at
   * the GPU price) in the same transaction. Returns the finished row, or null when the job had moved on.
   */
  async finish(jobId: string, workerId: string, outcome: JobOutcome): Promise<EndpointJob | null> {
    const now = this.clock.now();
    const trigger: JobTrigger =
      outcome.status === 'COMPLETED' ? 'complete' : outcome.status === 'FAILED' ? 'fail' : 'timeout';
    // The job's end and its execution's usage record (recordExecutionSql) in one statement.
    const [row] = await this.db.sql.query(
      `WITH done AS (
         UPDATE endpoint_jobs
            SET status = $3, output = $4::jsonb, error = $5, completed_at = $6, updated_at = $6, lease_until = NULL,
                webhook_status = CASE WHEN webhook IS NULL THEN NULL ELSE 'pending' END, webhook_next_at = $6
          WHERE id = $1 AND worker_id = $2 AND status = ANY ($7::text[])
          RETURNING *),
       ${recordExecutionSql('$6', '$8')}
       SELECT ${jobColumns('done')} FROM done`,
      [
        jobId,
        workerId,
        move(trigger).to,
        outcome.output === undefined ? null : JSON.stringify(outcome.output),
        outcome.error ?? null,
        now,
        move(trigger).from,
        newId('use'),
      ],
      'endpoint_jobs_finish',
    );
    return row ? jobFromRow(row) : null;
  }

  /**
   * The worker (or this replica) went away before answering: the job goes back to the queue, keeping its
   * place (queued_at), unless it was already tried MAX_ATTEMPTS times — then it fails with `reason`.
   */
  async requeue(jobId: string, reason: string, workerId?: string, counted = true): Promise<JobStatus | null> {
    const now = this.clock.now();
    if (!counted) {
      const rows = await this.db.sql.query<{ status: JobStatus }>(
        `UPDATE endpoint_jobs SET status = 'IN_QUEUE', attempts = GREATEST(attempts - 1, 0), worker_id = NULL,
                lease_until = NULL, dispatched_by = NULL, started_at = NULL, updated_at = $3
          WHERE id = $1 AND status IN (${fromList('requeue')}) AND ($2::text IS NULL OR worker_id = $2)
          RETURNING status`,
        [jobId, workerId ?? null, now],
      );
      return rows[0]?.status ?? null;
    }
    const rows = await this.db.sql.query<{ status: JobStatus }>(
      `UPDATE endpoint_jobs
          SET status = CASE WHEN attempts >= $3 THEN 'FAILED' ELSE 'IN_QUEUE' END,
              error = CASE WHEN attempts >= $3 THEN $4 ELSE error END,
              completed_at = CASE WHEN attempts >= $3 THEN $5::timestamptz ELSE NULL END,
              webhook_status = CASE WHEN attempts >= $3 AND webhook IS NOT NULL THEN 'pending' ELSE webhook_status END,
              webhook_next_at = CASE WHEN attempts >= $3 THEN $5::timestamptz ELSE webhook_next_at END,
              worker_id = CASE WHEN attempts >= $3 THEN worker_id ELSE NULL END,
              started_at = CASE WHEN attempts >= $3 THEN started_at ELSE NULL END,
              lease_until = NULL, dispatched_by = NULL, updated_at = $5
        WHERE id = $1 AND status IN (${fromList('requeue')}) AND ($2::text IS NULL OR worker_id = $2)
        RETURNING status`,
      [jobId, workerId ?? null, MAX_ATTEMPTS, `worker lost ${MAX_ATTEMPTS} times: ${reason}`, now],
    );
    return rows[0]?.status ?? null;
  }

  /** Jobs of workers that failed or were lost: queued again (or failed, after MAX_ATTEMPTS). */
  async requeueWorker(workerId: string, reason: string): Promise<number> {
    const rows = await this.db.sql.query<{ id: string }>(
      `SELECT id FROM endpoint_jobs WHERE worker_id = $1 AND status = 'IN_PROGRESS'`,
      [workerId],
    );
    for (const { id } of rows) await this.requeue(id, reason, workerId);
    return rows.length;
  }

  /** Jobs this replica ran when it shut down: queued again at once, for another replica or the restart. */
  async releaseReplica(replicaId: string): Promise<number> {
    const rows = await this.db.sql.query<{ id: string }>(
      `UPDATE endpoint_jobs SET status = 'IN_QUEUE', worker_id = NULL, lease_until = NULL, dispatched_by = NULL,
              started_at = NULL, attempts = GREATEST(attempts - 1, 0), updated_at = $2
        WHERE status = 'IN_PROGRESS' AND dispatched_by = $1 RETURNING id`,
      [replicaId, this.clock.now()],
    );
    return rows.length;
  }

  /** In-progress jobs whose lease ran out (the replica running them died): back to the queue. */
  async expireLeases(): Promise<number> {
    const rows = await this.db.sql.query<{ id: string }>(
      `SELECT id FROM endpoint_jobs WHERE status = 'IN_PROGRESS' AND lease_until < $1 LIMIT 500`,
      [this.clock.now()],
    );
    let n = 0;
    for (const { id } of rows) if (await this.requeue(id, 'the control plane running it stopped')) n += 1;
    return n;
  }

  /** Queued or running jobs past their ttl: TIMED_OUT. Returns their ids. */
  async expireTtl(): Promise<string[]> {
    const now = this.clock.now();
    const rows = await this.db.sql.query<{ id: string }>(
      `UPDATE endpoint_jobs
          SET status = '${move('timeout').to}', error = 'ttl expired before the job finished', completed_at = $1,
              lease_until = NULL, updated_at = $1,
              webhook_status = CASE WHEN webhook IS NULL THEN NULL ELSE 'pending' END, webhook_next_at = $1
        WHERE status IN (${fromList('timeout')}) AND expires_at <= $1
        RETURNING id`,
      [now],
    );
    return rows.map((r) => r.id);
  }

  /** IN_QUEUE or IN_PROGRESS → CANCELLED; a finished job is answered as it is. */
  async cancel(endpointId: string, jobId: string): Promise<EndpointJob> {
    const job = await this.find(endpointId, jobId);
    if (isFinal(job.status)) return job;
    const now = this.clock.now();
    // A job cancelled while running gets the usage record of the time it ran, in the same statement.
    await this.db.sql.query(
      `WITH done AS (
         UPDATE endpoint_jobs SET status = $3, completed_at = $2, updated_at = $2, lease_until = NULL,
                webhook_status = CASE WHEN webhook IS NULL THEN NULL ELSE 'pending' END, webhook_next_at = $2
          WHERE id = $1 AND status = ANY ($4::text[])
          RETURNING *),
       ${recordExecutionSql('$2', '$5')}
       SELECT id FROM done`,
      [jobId, now, move('cancel').to, move('cancel').from, newId('use')],
      'endpoint_jobs_cancel',
    );
    return this.find(endpointId, jobId);
  }

  /** FAILED or TIMED_OUT → IN_QUEUE with a fresh ttl (RunPod retries only those). */
  async retry(endpointId: string, jobId: string): Promise<EndpointJob> {
    const job = await this.find(endpointId, jobId);
    const now = this.clock.now();
    const rows = await this.db.sql.query<{ id: string }>(
      `UPDATE endpoint_jobs
          SET status = '${move('retry').to}', output = NULL, error = NULL, worker_id = NULL, started_at = NULL,
              completed_at = NULL, lease_until = NULL, dispatched_by = NULL, attempts = 0, retries = retries + 1,
              stream_count = 0, stream_read = 0, queued_at = $2, expires_at = $2::timestamptz + (ttl_ms * interval '1 millisecond'),
              webhook_status = NULL, webhook_attempts = 0, webhook_next_at = NULL, webhook_error = NULL, updated_at = $2
        WHERE id = $1 AND status IN (${fromList('retry')}) RETURNING id`,
      [jobId, now],
    );
    if (rows.length === 0) {
      throw new ApiError(
        'JOB_NOT_RETRYABLE',
        `job ${jobId} is ${job.status}; only FAILED or TIMED_OUT jobs are retried`,
        {
          jobId,
          status: job.status,
          retryableStatuses: move('retry').from,
        },
      );
    }
    await this.db.prisma.endpointJobChunk.deleteMany({ where: { jobId } });
    return this.find(endpointId, jobId);
  }

  /** Every queued job of the endpoint → CANCELLED; running jobs go on. */
  async purge(endpointId: string): Promise<number> {
    const now = this.clock.now();
    const rows = await this.db.sql.query<{ id: string }>(
      `UPDATE endpoint_jobs SET status = 'CANCELLED', error = 'purged from the queue', completed_at = $2, updated_at = $2,
              webhook_status = CASE WHEN webhook IS NULL THEN NULL ELSE 'pending' END, webhook_next_at = $2
        WHERE endpoint_id = $1 AND status = 'IN_QUEUE' RETURNING id`,
      [endpointId, now],
    );
    return rows.length;
  }

  /** The endpoint was deleted: every queued or running job is cancelled (in the caller's transaction). */
  async cancelAll(tx: Tx, endpointId: string): Promise<number> {
    const now = this.clock.now();
    return tx.$executeRawUnsafe(
      `UPDATE endpoint_jobs SET status = 'CANCELLED', error = 'the endpoint was deleted', completed_at = $2,
              lease_until = NULL, updated_at = $2
        WHERE endpoint_id = $1 AND status IN (${fromList('cancel')})`,
      endpointId,
      now,
    );
  }

  async counts(endpointId: string): Promise<{ queued: number; inProgress: number }> {
    const [row] = await this.db.sql.query<{ queued: number; in_progress: number }>(
      `SELECT count(*) FILTER (WHERE status = 'IN_QUEUE')::int AS queued,
              count(*) FILTER (WHERE status = 'IN_PROGRESS')::int AS in_progress
         FROM endpoint_jobs WHERE endpoint_id = $1 AND status IN ('IN_QUEUE', 'IN_PROGRESS')`,
      [endpointId],
    );
    return { queued: row?.queued ?? 0, inProgress: row?.in_progress ?? 0 };
  }

  /** A partial output of a streaming worker, numbered from 1. */
  async appendChunk(jobId: string, output: unknown): Promise<number | null> {
    return this.db.prisma.$transaction(async (tx: Tx) => {
      const rows = await tx.$queryRawUnsafe<{ stream_count: number }[]>(
        `UPDATE endpoint_jobs SET stream_count = stream_count + 1 WHERE id = $1 AND status = 'IN_PROGRESS'
         RETURNING stream_count`,
        jobId,
      );
      const seq = rows[0]?.stream_count;
      if (seq === undefined) return null;
      await tx.endpointJobChunk.create({
        data: { jobId, seq, output: json(output), createdAt: this.clock.now() },
      });
      return seq;
    }, TX_OPTIONS);
  }

  /**
   * Stream chunks. Without `offset`, RunPod's semantics: the chunks not yet read, and the read cursor
   * moves past them (one atomic UPDATE, so two readers never get the same chunk). With `offset`, the
   * chunks after that sequence number, cursor untouched.
   */
  async readStream(jobId: string, offset: number | null): Promise<{ seq: number; output: unknown }[]> {
    let from: number;
    let to: number;
    if (offset === null) {
      const rows = await this.db.sql.query<{ from_seq: number; to_seq: number }>(
        `UPDATE endpoint_jobs j SET stream_read = j.stream_count
           FROM (SELECT id, stream_read AS old FROM endpoint_jobs WHERE id = $1 FOR UPDATE) o
          WHERE j.id = o.id RETURNING o.old AS from_seq, j.stream_count AS to_seq`,
        [jobId],
      );
      from = rows[0]?.from_seq ?? 0;
      to = rows[0]?.to_seq ?? 0;
    } else {
      from = offset;
      to = Number.POSITIVE_INFINITY;
    }
    if (to <= from) return [];
    const chunks = await this.db.prisma.endpointJobChunk.findMany({
      where: { jobId, seq: offset === null ? { gt: from, lte: to } : { gt: from } },
      orderBy: { seq: 'asc' },
    });
    return chunks.map((c) => ({ seq: c.seq, output: c.output }));
  }

  /** Housekeeping: inputs and outputs of jobs past their ttl are dropped; finished jobs past retention deleted. */
  async prune(): Promise<void> {
    const now = this.clock.now();
    await this.db.sql.query(
      `UPDATE endpoint_jobs SET input = NULL, output = NULL, updated_at = $1
        WHERE expires_at <= $1 AND status IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT')
          AND (input IS NOT NULL OR output IS NOT NULL)`,
      [now],
    );
    await this.db.sql.query(
      `DELETE FROM endpoint_job_chunks c USING endpoint_jobs j
        WHERE c.job_id = j.id AND j.expires_at <= $1 AND j.status IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT')`,
      [now],
    );
    await this.db.sql.query(
      `DELETE FROM endpoint_jobs WHERE completed_at < $1 AND status IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT')`,
      [new Date(now.getTime() - JOB_RETENTION_MS)],
    );
  }
}

/**
 * The usage record of one execution, as CTEs after a CTE `done` that ended the job (UPDATE … RETURNING *),
 * so that the end and its record are one statement (usage reports, GET /v2/accounts/usage/endpoints):
 * kind execution, quantity 1, GPU hours = (completed_at − started_at) × the endpoint's gpu_count, cost 0:
 * the worker's uptime is what is billed (billing/worker-sessions.ts) and already holds these GPU-seconds,
 * so charging them again here would bill them twice. The record counts executions, their duration and
 * outcome. A job that never started (ended while queued) has none. `now` and `id` are parameter
 * references of the enclosing statement.
 */
function recordExecutionSql(now: string, id: string): string {
  return `measured AS (
         SELECT d.*, e.gpu_type AS endpoint_gpu_type, e.gpu_count AS endpoint_gpu_count,
                GREATEST(0, round(extract(epoch FROM d.completed_at - d.started_at) * 1000))::bigint AS duration_ms
           FROM done d JOIN endpoints e ON e.id = d.endpoint_id
          WHERE d.started_at IS NOT NULL),
       recorded AS (
         INSERT INTO usage_records (id, account_id, user_id, resource_type, resource_id, kind, gpu_type, gpu_count,
                quantity, unit, gpu_hours, cost, currency, started_at, ended_at, metadata, created_at)
         SELECT ${id}, m.account_id, m.user_id, 'endpoint', m.endpoint_id, 'execution', m.endpoint_gpu_type,
                m.endpoint_gpu_count, 1, 'executions', m.duration_ms / 3600000.0 * m.endpoint_gpu_count, 0, 'USD',
                m.started_at, m.completed_at,
                jsonb_build_object('jobId', m.id, 'durationMs', m.duration_ms, 'success', m.status = 'COMPLETED',
                                   'status', m.status),
                ${now}
           FROM measured m)`;
}

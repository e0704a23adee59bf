import { ApiError } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import type { EndpointJob } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { isPrivateUrlHost } from '../util/outbound-guard.ts';
import type { Dispatcher } from './dispatcher.ts';
import { EndWatch } from './end-watch.ts';
import type { JobQueue, SubmitInput } from './jobs.ts';
import type { EndpointService } from './service.ts';
import { isFinal } from './states.ts';
import { configurationOf, viewJob } from './view.ts';

/** runsync waits this long by default (RunPod: 90 s), and at most 300 s. */
export const DEFAULT_SYNC_WAIT_MS = 90_000;
export const MAX_SYNC_WAIT_MS = 300_000;
/** /stream waits this long for a new chunk by default, at most 60 s. */
export const DEFAULT_STREAM_WAIT_MS = 5_000;
export const MAX_STREAM_WAIT_MS = 60_000;
/** Finished-job counts of GET /v2/<endpoint_id>/health cover this window. */
export const HEALTH_WINDOW_MS = 86_400_000;

/** /stream looks for new chunks this often. */
const POLL_MS = 200;
/**
 * A waiting runsync or status-sync looks at its job this often as a safety net only: the job's end wakes
 * it at once (the dispatcher's signal in this process, a NOTIFY from the replica that finished it).
 */
export const WAIT_SAFETY_POLL_MS = 2_000;

function checkWebhook(url: string, allowPrivate: boolean): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ApiError('VALIDATION_ERROR', 'webhook is not a URL', { field: 'webhook', reason: 'not a URL' });
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ApiError('VALIDATION_ERROR', 'webhook must be http or https', {
      field: 'webhook',
      reason: 'scheme',
    });
  }
  if (parsed.username || parsed.password) {
    throw new ApiError('VALIDATION_ERROR', 'webhook must not carry credentials', {
      field: 'webhook',
      reason: 'credentials in the URL',
    });
  }
  if (!allowPrivate && isPrivateUrlHost(parsed)) {
    throw new ApiError('VALIDATION_ERROR', 'webhook points at a private address', {
      field: 'webhook',
      reason: 'loopback, private and link-local targets are refused unless ANVIL_OUTBOUND_ALLOW_PRIVATE=true',
    });
  }
}

/** A request to /run or /runsync: the queue's input plus RunPod fields Anvil refuses when they would act. */
export interface RunInput extends SubmitInput {
  policy?: (NonNullable<SubmitInput['policy']> & { lowPriority?: boolean | undefined }) | undefined;
  s3Config?: unknown;
}

/** RunPod fields with no effect here: refused by name rather than dropped silently. */
function refuseUnsupported(input: RunInput): void {
  if (input.policy?.lowPriority === true) {
    throw new ApiError(
      'NOT_SUPPORTED',
      'policy.lowPriority is not supported: every queued job counts for scaling',
      {
        field: 'policy.lowPriority',
        reason: 'the autoscaler counts every queued job; leave it out or false',
      },
    );
  }
  if (input.s3Config !== undefined) {
    throw new ApiError('NOT_SUPPORTED', 's3Config is not supported: workers get only {id, input}', {
      field: 's3Config',
      reason: 'pass storage settings in input or in the endpoint’s environmentVariables',
    });
  }
}

/**
 * The execution API (RunPod's): queue a job, wait for it, read its status and stream, cancel, retry,
 * purge the queue, and the queue's health. Jobs need `execute` on the endpoint to run or change, `read` to
 * look at; another account's endpoint is 404 ENDPOINT_NOT_FOUND, another endpoint's job 404 JOB_NOT_FOUND.
 */
export class ExecutionService {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      accounts: AccountServices;
      endpoints: EndpointService;
      jobs: JobQueue;
      dispatcher: Dispatcher;
      /** The autoscaler wants to see a new job at once (a fixed worker count does not change with it). */
      kickSupervisor: () => void;
      allowPrivateWebhooks: boolean;
      /** The safety-net look of waiting runsyncs (WAIT_SAFETY_POLL_MS; tests make it long). */
      waitPollMs?: number;
    },
  ) {}

  async run(actor: Actor, endpointId: string, input: RunInput) {
    const endpoint = await this.d.endpoints.require(actor, endpointId, 'execute');
    refuseUnsupported(input);
    if (input.webhook !== undefined) checkWebhook(input.webhook, this.d.allowPrivateWebhooks);
    const job = await this.d.jobs.submit(
      endpoint,
      {
        accountId: endpoint.accountId,
        userId: actor.principal.userId,
        keyId: actor.principal.keyId,
      },
      input,
    );
    // Dispatched while the activity is recorded: that record is no part of the job's way to a worker.
    this.d.dispatcher.kick();
    // A supervisor pass reads every endpoint and its workers; run on each job it sat in the way of the
    // dispatch (PGlite runs one statement at a time), and only autoscaling sizes workers from the queue.
    if (configurationOf(endpoint).autoScaling.enabled) this.d.kickSupervisor();
    await this.d.accounts.resources.recordExecution(endpoint.accountId, actor.principal.userId, endpoint.id);
    return job;
  }

  async runAsync(actor: Actor, endpointId: string, input: RunInput) {
    const job = await this.run(actor, endpointId, input);
    return { id: job.id, status: job.status };
  }

  /** Queues the job and waits up to `waitMs` for it to finish; answers its status either way. */
  async runSync(actor: Actor, endpointId: string, input: RunInput, waitMs: number) {
    // Listening before the job is queued: a fast worker may end it before run() returns.
    const watch = new EndWatch(this.d.dispatcher, endpointId);
    try {
      const job = await this.run(actor, endpointId, input);
      watch.follow(job.id);
      return await this.#waitFinal(endpointId, job.id, waitMs, watch, job);
    } finally {
      watch.close();
    }
  }

  /**
   * The job once it is final, or as it is when `waitMs` ran out. Woken by the job's end (the dispatcher's
   * signal here, a NOTIFY from another replica), which comes with the final row when this replica finished
   * it: that one is answered without reading the job again. `watch` listens from before the first read
   * (or the queueing, whose row is `first`), so an end meanwhile is not missed; the rare look every
   * waitPollMs only covers an announcement that never arrived.
   */
  async #waitFinal(endpointId: string, jobId: string, waitMs: number, watch: EndWatch, first?: EndpointJob) {
    const until = Date.now() + waitMs;
    const pollMs = this.d.waitPollMs ?? WAIT_SAFETY_POLL_MS;
    let job = first ?? (await this.d.jobs.find(endpointId, jobId));
    for (;;) {
      const left = until - Date.now();
      if (isFinal(job.status) || left <= 0) return viewJob(job, this.d.clock.now());
      await watch.sleep(Math.min(pollMs, left));
      const end = watch.take();
      // The final row when it came with the end; otherwise (ended elsewhere, the safety poll, or a row past
      // its ttl, so that the answer is find()'s 404 as it would be) the job is read.
      job =
        end !== null && end !== true && end.expiresAt.getTime() > this.d.clock.now().getTime()
          ? end
          : await this.d.jobs.find(endpointId, jobId);
    }
  }

  /**
   * RunPod's status-sync (its JavaScript SDK's runSync polls it once the job outlives runsync's wait):
   * the job's status, after waiting up to `waitMs` for it to finish; a finished job is answered at once.
   */
  async statusSync(actor: Actor, endpointId: string, jobId: string, waitMs: number) {
    await this.d.endpoints.require(actor, endpointId, 'read');
    const watch = new EndWatch(this.d.dispatcher, endpointId);
    watch.follow(jobId);
    try {
      return await this.#waitFinal(endpointId, jobId, waitMs, watch);
    } finally {
      watch.close();
    }
  }

  async status(actor: Actor, endpointId: string, jobId: string, query: { ttl?: string | undefined } = {}) {
    await this.d.endpoints.require(actor, endpointId, 'read');
    if (query.ttl !== undefined) {
      throw new ApiError(
        'NOT_SUPPORTED',
        'ttl is not supported on /status: set policy.ttl when queueing the job',
        {
          field: 'ttl',
          reason: 'a job’s ttl is set once, by policy.ttl on /run or /runsync',
        },
      );
    }
    return viewJob(await this.d.jobs.find(endpointId, jobId), this.d.clock.now());
  }

  /**
   * Partial outputs: without `offset`, those not yet read (RunPod: each call returns what came since the
   * last one); with `offset`, those after that sequence number. Waits up to `waitMs` for one when there
   * is none yet and the job is not finished.
   */
  async stream(
    actor: Actor,
    endpointId: string,
    jobId: string,
    options: { offset: number | null; waitMs: number },
  ) {
    await this.d.endpoints.require(actor, endpointId, 'read');
    const until = Date.now() + options.waitMs;
    for (;;) {
      const job = await this.d.jobs.find(endpointId, jobId);
      const final = isFinal(job.status);
      const chunks = await this.d.jobs.readStream(jobId, options.offset);
      if (chunks.length > 0 || final || Date.now() >= until) {
        return {
          id: job.id,
          status: job.status,
          stream: chunks.map((c) => ({ output: c.output, seq: c.seq })),
          streamCount: job.streamCount,
          error: job.error,
        };
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(POLL_MS, Math.max(0, until - Date.now()))));
    }
  }

  async cancel(actor: Actor, endpointId: string, jobId: string) {
    await this.d.endpoints.require(actor, endpointId, 'execute');
    const job = await this.d.jobs.cancel(endpointId, jobId);
    this.d.dispatcher.abort(jobId);
    // Waiters (runsync, status-sync), here and on other replicas, answer with the cancel at once.
    if (job.status === 'CANCELLED') this.d.dispatcher.notifyFinished(jobId, job);
    return { id: job.id, status: job.status };
  }

  async retry(actor: Actor, endpointId: string, jobId: string) {
    await this.d.endpoints.require(actor, endpointId, 'execute');
    const job = await this.d.jobs.retry(endpointId, jobId);
    this.d.dispatcher.kick();
    this.d.kickSupervisor();
    return { id: job.id, status: job.status };
  }

  async purge(actor: Actor, endpointId: string) {
    await this.d.endpoints.require(actor, endpointId, 'execute');
    const removed = await this.d.jobs.purge(endpointId);
    return { removed, status: 'completed' as const };
  }

  /**
   * RunPod's queue health: jobs inQueue and inProgress now; completed, failed, cancelled, timedOut (by
   * completed_at) and retried (by updated_at) in the last 24 h. Workers by state: initializing (container
   * starting or not yet answering GET /health), ready = idle (no job) + running (at least one job),
   * draining, unhealthy (ready but its last health check failed), throttled (0: Anvil does not throttle).
   */
  async queueHealth(actor: Actor, endpointId: string) {
    await this.d.endpoints.require(actor, endpointId, 'read');
    const since = new Date(this.d.clock.now().getTime() - HEALTH_WINDOW_MS);
    const [jobs] = await this.d.db.sql.query<Record<string, number>>(
      `SELECT count(*) FILTER (WHERE status = 'IN_QUEUE')::int AS in_queue,
              count(*) FILTER (WHERE status = 'IN_PROGRESS')::int AS in_progress,
              count(*) FILTER (WHERE status = 'COMPLETED' AND completed_at >= $2)::int AS completed,
              count(*) FILTER (WHERE status = 'FAILED' AND completed_at >= $2)::int AS failed,
              count(*) FILTER (WHERE status = 'CANCELLED' AND completed_at >= $2)::int AS cancelled,
              count(*) FILTER (WHERE status = 'TIMED_OUT' AND completed_at >= $2)::int AS timed_out,
              count(*) FILTER (WHERE retries > 0 AND updated_at >= $2)::int AS retried
         FROM endpoint_jobs WHERE endpoint_id = $1`,
      [endpointId, since],
    );
    const workers = await this.d.db.sql.query<{ status: string; busy: number; probe_failures: number }>(
      `SELECT w.status, w.probe_failures,
              (SELECT count(*) FROM endpoint_jobs j WHERE j.worker_id = w.id AND j.status = 'IN_PROGRESS')::int AS busy
         FROM endpoint_workers w WHERE w.endpoint_id = $1 AND w.status IN ('starting', 'ready', 'draining')`,
      [endpointId],
    );
    const ready = workers.filter((w) => w.status === 'ready');
    return {
      jobs: {
        inQueue: jobs?.['in_queue'] ?? 0,
        inProgress: jobs?.['in_progress'] ?? 0,
        completed: jobs?.['completed'] ?? 0,
        failed: jobs?.['failed'] ?? 0,
        cancelled: jobs?.['cancelled'] ?? 0,
        timedOut: jobs?.['timed_out'] ?? 0,
        retried: jobs?.['retried'] ?? 0,
      },
      workers: {
        idle: ready.filter((w) => w.busy === 0).length,
        running: ready.filter((w) => w.busy > 0).length,
        ready: ready.length,
        initializing: workers.filter((w) => w.status === 'starting').length,
        draining: workers.filter((w) => w.status === 'draining').length,
        unhealthy: ready.filter((w) => w.probe_failures > 0).length,
        throttled: 0,
      },
    };
  }
}

import { randomBase36 } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { EndpointJob } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { PassLoop } from '../util/pass-loop.ts';
import type { JobOutcome, JobQueue } from './jobs.ts';
import type { RunpodBridge } from './runpod/bridge.ts';
import { type RunAnswer, type WorkerClient, WorkerUnreachable } from './worker-client.ts';

export interface DispatcherOptions {
  /** How long a claimed job stays this replica's without a renewal. */
  leaseMs?: number;
  /** How often leases are renewed (and cancels made on other replicas noticed). */
  renewMs?: number;
  /** Pass interval while jobs wait in the queue but none could be dispatched (no free slot, worker in trouble). */
  idleMs?: number;
  /**
   * The safety sweep: the next pass when the queue was empty. Queued jobs are announced (kick() here,
   * a NOTIFY from other replicas), so this only catches what no announcement reached.
   */
  sweepMs?: number;
}

/** Replicas tell each other of queue changes on this channel (PostgreSQL; PGlite has one replica). */
const CHANNEL = 'anvil_endpoint_jobs';
/**
 * And of jobs that reached a final status, payload `<replica> <job id>`: a runsync or status-sync waiting on
 * one replica answers as soon as another one records the job's end, rather than at its next look.
 */
const FINISHED_CHANNEL = 'anvil_endpoint_job_finished';

interface Running {
  job: EndpointJob;
  abort: AbortController;
}

/** undelivered: claimed for a RunPod-protocol worker whose take was gone by then (back to the queue, uncounted). */
type Stop = { stop: 'timeout' | 'cancelled' | 'shutdown' | 'undelivered' };

/** How long a worker that could not be reached gets no job. */
const TROUBLE_BACKOFF_MS = 2_000;

/** The job's final status and fields from a worker's answer (either contract). */
export function outcomeOf(answer: RunAnswer): JobOutcome {
  return answer.kind === 'output'
    ? { status: 'COMPLETED', output: answer.output }
    : answer.kind === 'error'
      ? { status: 'FAILED', error: answer.error }
      : answer.error !== null
        ? { status: 'FAILED', error: answer.error, output: answer.outputs }
        : { status: 'COMPLETED', output: answer.outputs };
}

/**
 * Told when a job reaches a final status (runsync waiters, webhooks): on this replica with its final row
 * when the one that finished it has it at hand, and with none when another replica announced it (or the
 * row was not read), so the listener reads it.
 */
export type JobListener = (jobId: string, row: EndpointJob | null) => void;

/**
 * Takes queued jobs to workers with free slots (pull semantics: a job leaves the queue only when a
 * worker can run it at once) and records their answers. Every replica runs one; they share the queue
 * through the database (JobQueue.claim), each holding leases on the jobs it runs. A replica that stops
 * gives its running jobs back to the queue; one that dies loses its leases, and the jobs are queued
 * again when they run out (delivery is at least once, as RunPod's).
 */
export class Dispatcher {
  readonly replicaId = `epd_${randomBase36(12)}`;
  readonly #running = new Map<string, Running>();
  readonly #listeners = new Set<JobListener>();
  /** Workers that could not be reached, and until when no job is sent to them (the supervisor checks them). */
  readonly #troubled = new Map<string, number>();
  readonly #loop: PassLoop<{ dispatched: number; queued: boolean }>;
  readonly #changeListeners = new Set<() => void>();
  #unlisten: (() => Promise<void>)[] = [];
  /** A NOTIFY is being sent / another is wanted after it (kicks coalesce into one at a time). */
  #notifying = false;
  #notifyAgain = false;
  #renewTimer: NodeJS.Timeout | null = null;
  readonly #leaseMs: number;
  readonly #renewMs: number;
  readonly #idleMs: number;
  readonly #sweepMs: number;

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      jobs: JobQueue;
      client: WorkerClient;
      /** Workers of the RunPod protocol pull: the takes they hold open here, and their answers. */
      runpod: RunpodBridge;
      logger: Logger;
      /** A worker failed to take a job (connection refused, tunnel failed): the supervisor probes it. */
      onWorkerTrouble?: (workerId: string, error: string) => void;
    },
    options: DispatcherOptions = {},
  ) {
    this.#leaseMs = options.leaseMs ?? 15_000;
    this.#renewMs = options.renewMs ?? 2_000;
    this.#idleMs = options.idleMs ?? 250;
    this.#sweepMs = options.sweepMs ?? safetySweepMs(d.db);
    this.#loop = new PassLoop({
      run: () => this.#pass(),
      // Another look at once while jobs were started: more may be waiting for the slots left. Jobs left
      // waiting: soon again (a worker in trouble becomes usable after its backoff, which nothing announces).
      // An empty queue: nothing to do until a kick, but for the safety sweep.
      after: ({ dispatched, queued }) => (dispatched > 0 ? 0 : queued ? this.#idleMs : this.#sweepMs),
      failedMs: this.#idleMs,
      onError: (error) => this.d.logger.error({ err: error }, 'endpoint dispatcher pass failed'),
    });
  }

  onFinished(listener: JobListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Told on every queue change this replica makes or hears of (maintenance wakes on it). */
  /** The pass loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.#loop.passes, wakeAt: this.#loop.wakeAt };
  }

  onQueueChange(listener: () => void): () => void {
    this.#changeListeners.add(listener);
    return () => this.#changeListeners.delete(listener);
  }

  start(): void {
    if (this.#renewTimer) return;
    this.#loop.start();
    // Renews the leases of the jobs running here; with none running, a renewal costs nothing.
    this.#renewTimer = setInterval(() => void this.#renew(), this.#renewMs);
    this.#renewTimer.unref();
    if (this.d.db.kind !== 'postgres') return;
    this.#listen(CHANNEL, (payload) => {
      if (payload === this.replicaId) return;
      this.#loop.kick();
      this.#changed();
    });
    this.#listen(FINISHED_CHANNEL, (payload) => {
      const [replica, jobId] = payload.split(' ');
      if (replica === this.replicaId || !jobId) return;
      for (const listener of this.#listeners) listener(jobId, null);
    });
  }

  #listen(channel: string, onPayload: (payload: string) => void): void {
    void this.d.db.listen(channel, onPayload).then(
      (unlisten) => {
        if (this.#renewTimer) this.#unlisten.push(unlisten);
        else void unlisten();
      },
      (error: unknown) =>
        this.d.logger.error({ err: error, channel }, 'endpoint dispatcher could not listen for job changes'),
    );
  }

  /** Stops taking jobs, aborts those running here and queues them again. */
  async stop(): Promise<void> {
    if (this.#renewTimer) clearInterval(this.#renewTimer);
    this.#renewTimer = null;
    for (const unlisten of this.#unlisten.splice(0)) await unlisten();
    await this.#loop.stop();
    for (const running of this.#running.values()) running.abort.abort({ stop: 'shutdown' } satisfies Stop);
    const released = await this.d.jobs.releaseReplica(this.replicaId).catch(() => 0);
    if (released > 0)
      this.d.logger.info({ jobs: released }, 'running endpoint jobs queued again for shutdown');
  }

  /** A job was queued or a worker became ready: look for work now, here and on the other replicas. */
  kick(): void {
    this.#loop.kick();
    this.#changed();
    this.#announce();
  }

  /** Cancelled through this replica: stop its request at once (other replicas notice at the next renewal). */
  abort(jobId: string): void {
    this.#running.get(jobId)?.abort.abort({ stop: 'cancelled' } satisfies Stop);
    this.#changed();
  }

  #changed(): void {
    for (const listener of this.#changeListeners) listener();
  }

  /** NOTIFYs the other replicas (PostgreSQL only), one at a time: kicks meanwhile make one more. */
  #announce(): void {
    if (this.d.db.kind !== 'postgres' || !this.#renewTimer) return;
    if (this.#notifying) {
      this.#notifyAgain = true;
      return;
    }
    this.#notifying = true;
    this.#notifyAgain = false;
    void this.d.db
      .notify(CHANNEL, this.replicaId)
      .catch((error: unknown) =>
        this.d.logger.warn({ err: error }, 'endpoint dispatcher could not notify other replicas'),
      )
      .finally(() => {
        this.#notifying = false;
        if (this.#notifyAgain) this.#announce();
      });
  }

  get runningCount(): number {
    return this.#running.size;
  }

  /** One pass: claim jobs for every ready worker with a free slot and a queue; returns how many started. */
  async pass(): Promise<number> {
    return (await this.#pass()).dispatched;
  }

  async #pass(): Promise<{ dispatched: number; queued: boolean }> {
    // Most passes find no queued job anywhere: this probe (one index lookup) answers them. Both are
    // prepared: the join below takes several milliseconds to plan, on PGlite in the API's own thread.
    const queued = await this.d.db.sql.query(
      `SELECT 1 FROM endpoint_jobs WHERE status = 'IN_QUEUE' LIMIT 1`,
      [],
      'dispatcher_any_queued',
    );
    if (queued.length === 0) return { dispatched: 0, queued: false };
    const workers = await this.d.db.sql.query<{
      id: string;
      endpoint_id: string;
      max_concurrency: number;
      worker_port: number;
      worker_protocol: string;
      busy: number;
    }>(
      `SELECT w.id, w.endpoint_id, e.max_concurrency, e.worker_port, e.worker_protocol,
              (SELECT count(*) FROM endpoint_jobs j WHERE j.worker_id = w.id AND j.status = 'IN_PROGRESS')::int AS busy
         FROM endpoint_workers w JOIN endpoints e ON e.id = w.endpoint_id JOIN hosts h ON h.id = w.host_id
        WHERE w.status = 'ready' AND e.deleted_at IS NULL
          -- A worker is reached through its agent: none while the agent is not connected.
          AND h.state = 'ready' AND h.connected_replica_id IS NOT NULL
          AND EXISTS (SELECT 1 FROM endpoint_jobs q WHERE q.endpoint_id = w.endpoint_id AND q.status = 'IN_QUEUE')
        ORDER BY w.endpoint_id, 6, w.ready_at, w.id`,
      [],
      'dispatcher_ready_workers',
    );
    let dispatched = 0;
    const now = Date.now();
    const takes = this.d.runpod.takes();
    for (const w of workers) {
      if (w.busy >= w.max_concurrency) continue;
      if ((this.#troubled.get(w.id) ?? 0) > now) continue;
      const pulls = w.worker_protocol === 'runpod';
      // A RunPod-protocol worker gets jobs only through a take it holds open on this replica.
      const batch = pulls ? takes.get(w.id) : undefined;
      if (pulls && batch === undefined) continue;
      const jobs = await this.d.jobs.claim(
        { id: w.id, endpointId: w.endpoint_id, maxConcurrency: w.max_concurrency },
        this.replicaId,
        this.#leaseMs,
        batch,
      );
      if (jobs.length === 0) continue;
      for (const job of jobs) {
        dispatched += 1;
        this.#run(job, w.id, w.worker_port, pulls);
      }
      if (
        pulls &&
        !this.d.runpod.deliver(
          w.id,
          jobs.map((job) => ({ id: job.id, input: job.input ?? {} })),
        )
      ) {
        for (const job of jobs)
          this.#running.get(job.id)?.abort.abort({ stop: 'undelivered' } satisfies Stop);
      }
    }
    return { dispatched, queued: true };
  }

  #run(job: EndpointJob, workerId: string, port: number, pulls: boolean): void {
    const abort = new AbortController();
    this.#running.set(job.id, { job, abort });
    const timer = setTimeout(() => abort.abort({ stop: 'timeout' } satisfies Stop), job.executionTimeoutMs);
    timer.unref();
    void this.#execute(job, workerId, port, pulls, abort.signal)
      .catch((error: unknown) =>
        this.d.logger.error(
          { err: error, job_id: job.id, worker_id: workerId },
          'endpoint job dispatch failed',
        ),
      )
      .finally(() => {
        clearTimeout(timer);
        this.#running.delete(job.id);
        this.kick();
      });
  }

  async #execute(
    job: EndpointJob,
    workerId: string,
    port: number,
    pulls: boolean,
    signal: AbortSignal,
  ): Promise<void> {
    const log = this.d.logger;
    let answer: RunAnswer;
    const options = {
      signal,
      onChunk: async (output: unknown) => {
        await this.d.jobs.appendChunk(job.id, output);
      },
    };
    try {
      answer = pulls
        ? await this.d.runpod.run(workerId, job.id, options)
        : await this.d.client.run(workerId, port, { id: job.id, input: job.input }, options);
    } catch (error) {
      const stop = (signal.reason as Stop | undefined)?.stop;
      if (signal.aborted && stop === 'undelivered') {
        await this.d.jobs.requeue(job.id, 'the worker stopped waiting for it', workerId, false);
        return;
      }
      if (signal.aborted && stop === 'timeout') {
        const done = await this.d.jobs.finish(job.id, workerId, {
          status: 'TIMED_OUT',
          error: `execution timeout of ${job.executionTimeoutMs} ms passed`,
        });
        if (done) this.#finished(job.id, done);
        log.info({ job_id: job.id, worker_id: workerId }, 'endpoint job timed out');
        return;
      }
      // Cancelled (the row says so already) or shutting down (stop() queues it again).
      if (signal.aborted) return;
      const message = (error as Error).message;
      const sent = error instanceof WorkerUnreachable && error.sent;
      this.#troubled.set(workerId, Date.now() + TROUBLE_BACKOFF_MS);
      this.d.onWorkerTrouble?.(workerId, message);
      // A request that never reached the worker does not count as an attempt.
      const status = await this.d.jobs.requeue(job.id, message, workerId, sent);
      if (status === 'FAILED') this.#finished(job.id, null);
      log.warn(
        { job_id: job.id, worker_id: workerId, sent, err: message },
        'endpoint worker did not answer: job queued again',
      );
      return;
    }
    const done = await this.d.jobs.finish(job.id, workerId, outcomeOf(answer));
    if (done) this.#finished(job.id, done);
  }

  #finished(jobId: string, row: EndpointJob | null): void {
    for (const listener of this.#listeners) listener(jobId, row);
    // Its webhook (if any) is due now: maintenance delivers it.
    this.#changed();
    if (this.d.db.kind !== 'postgres' || !this.#renewTimer) return;
    void this.d.db
      .notify(FINISHED_CHANNEL, `${this.replicaId} ${jobId}`)
      .catch((error: unknown) =>
        this.d.logger.warn(
          { err: error, job_id: jobId },
          'endpoint dispatcher could not announce a finished job',
        ),
      );
  }

  /**
   * A job reached a final status outside a dispatch here (ttl expiry, cancel, a job-done taken here for
   * another replica's dispatch): its waiters, here and on the other replicas, are told.
   */
  notifyFinished(jobId: string, row: EndpointJob | null = null): void {
    this.#finished(jobId, row);
  }

  /** Renews the leases of the jobs running here; aborts those that moved on (cancelled elsewhere, ttl). */
  async #renew(): Promise<void> {
    const ids = [...this.#running.keys()];
    if (ids.length === 0) return;
    try {
      const kept = await this.d.jobs.renew(ids, this.replicaId, this.#leaseMs);
      for (const id of ids) {
        if (!kept.has(id)) this.#running.get(id)?.abort.abort({ stop: 'cancelled' } satisfies Stop);
      }
    } catch (error) {
      this.d.logger.error({ err: error }, 'endpoint job lease renewal failed');
    }
  }
}

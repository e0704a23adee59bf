import { ENDPOINT_FAILED_EVENT, enqueueWebhookEvent } from '../accounts/webhook-outbox.ts';
import type { Clock } from '../auth/clock.ts';
import { billingStartOf, openWorkerSession } from '../billing/worker-sessions.ts';
import type { Endpoint, EndpointWorker, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs, soleProcess } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { PassLoop } from '../util/pass-loop.ts';
import { decideScale, type ScaleState } from './autoscaler.ts';
import type { Dispatcher } from './dispatcher.ts';
import type { JobQueue } from './jobs.ts';
import { RUNPOD_PING_INTERVAL_MS } from './runpod/environment.ts';
import type { EndpointStatus } from './states.ts';
import { configurationOf } from './view.ts';
import type { WorkerClient } from './worker-client.ts';
import type { WorkerPlacer } from './workers.ts';

export interface SupervisorOptions {
  /** Pass interval. */
  intervalMs?: number;
  /** How often a ready worker's GET /health is checked. */
  probeIntervalMs?: number;
  probeTimeoutMs?: number;
  /** Failed health checks in a row that make a ready worker failed (and replaced). */
  probeFailures?: number;
  /** A worker not ready this long after it was placed is failed (and replaced). */
  startupTimeoutMs?: number;
  /** Workers failing in a row, with none ready since, that put the endpoint in `error`. */
  errorAfterFailures?: number;
  /** While in error, how long between attempts to start a worker. */
  errorBackoffMs?: number;
}

/** A RunPod-protocol worker this long without a contact is failed: three missed pings. */
const RUNPOD_SILENCE_MS = 3 * RUNPOD_PING_INTERVAL_MS;

/** Advisory lock key: one supervisor pass at a time across replicas. */
const LOCK_KEY = 7_245_318_301;

interface WorkloadState {
  id: string;
  desired: string;
  phase: string;
  host_unreachable: boolean;
  actual_status: { error?: string | null; exitCode?: number | null; startedAt?: string | null } | null;
}

/**
 * Moves every endpoint toward its configuration from what the database says (a restarted control plane
 * or another replica carries on): workers become ready when their container runs and answers GET /health;
 * a worker whose container exits, whose host becomes unreachable or whose health checks keep failing is
 * replaced (its running jobs go back to the queue); the worker count follows workerCount or the
 * autoscaler; after an update, workers of the old configuration are drained as new ones become ready;
 * deleted endpoints lose their workers. One pass at a time across replicas (an advisory lock).
 */
export class EndpointSupervisor {
  readonly #loop: PassLoop<void>;
  readonly #suspect = new Set<string>();
  /** The last pass found no endpoint to look after (another replica holding the lock does not count). */
  #noEndpoints = false;
  readonly #o: Required<SupervisorOptions>;

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      jobs: JobQueue;
      placer: WorkerPlacer;
      client: WorkerClient;
      dispatcher: Dispatcher;
      logger: Logger;
    },
    options: SupervisorOptions = {},
  ) {
    this.#o = {
      intervalMs: options.intervalMs ?? 1_000,
      probeIntervalMs: options.probeIntervalMs ?? 10_000,
      probeTimeoutMs: options.probeTimeoutMs ?? 3_000,
      probeFailures: options.probeFailures ?? 3,
      startupTimeoutMs: options.startupTimeoutMs ?? 15 * 60_000,
      errorAfterFailures: options.errorAfterFailures ?? 3,
      errorBackoffMs: options.errorBackoffMs ?? 30_000,
    };
    this.#loop = new PassLoop({
      run: () => this.pass(),
      // No endpoint at all (nor a worker left to stop): nothing to reconcile until a kick (an endpoint
      // created or changed, a job queued, a container's state) or the safety sweep.
      after: () => (this.#noEndpoints ? safetySweepMs(this.d.db) : this.#o.intervalMs),
      failedMs: this.#o.intervalMs,
      kickedMs: 50,
      onError: (error) => this.d.logger.error({ err: error }, 'endpoint supervisor pass failed'),
    });
  }

  start(): void {
    this.#loop.start();
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** The pass loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.#loop.passes, wakeAt: this.#loop.wakeAt };
  }

  kick(): void {
    this.#loop.kick();
  }

  /** The dispatcher could not reach this worker: check its health at the next pass. */
  suspect(workerId: string): void {
    this.#suspect.add(workerId);
    this.kick();
  }

  /** One pass over every endpoint that has or should have workers. */
  async pass(): Promise<void> {
    // The lock keeps replicas' passes apart; a sole process (PGlite) has no one to keep out, and its one
    // session would take the lock again anyway. Its loop runs one pass at a time.
    if (soleProcess(this.d.db)) return this.#reconcileAll();
    await this.d.db.session(async (sql) => {
      const [lock] = await sql.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [LOCK_KEY]);
      if (!lock?.ok) return;
      try {
        await this.#reconcileAll();
      } finally {
        await sql.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY]);
      }
    });
  }

  async #reconcileAll(): Promise<void> {
    const endpoints = await this.d.db.prisma.endpoint.findMany({
      where: {
        OR: [
          { deletedAt: null },
          { workers: { some: { status: { in: ['starting', 'ready', 'draining'] } } } },
        ],
      },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      take: 1000,
    });
    this.#noEndpoints = endpoints.length === 0;
    for (const endpoint of endpoints) {
      try {
        await this.reconcile(endpoint);
      } catch (error) {
        this.d.logger.error({ err: error, endpoint_id: endpoint.id }, 'endpoint reconcile failed');
      }
    }
  }

  async reconcile(endpoint: Endpoint): Promise<void> {
    const workers = await this.#liveWorkers(endpoint.id);
    if (endpoint.deletedAt) {
      for (const worker of workers) await this.#remove(worker, 'stopped', 'the endpoint was deleted');
      return;
    }
    await this.#checkWorkers(endpoint, workers);
    const target = await this.#target(endpoint);
    await this.#adjust(endpoint, target);
    await this.#updateStatus(endpoint, target);
  }

  async #liveWorkers(endpointId: string): Promise<EndpointWorker[]> {
    return this.d.db.prisma.endpointWorker.findMany({
      where: { endpointId, status: { in: ['starting', 'ready', 'draining'] } },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
  }

  async #remove(
    worker: EndpointWorker,
    status: 'stopped' | 'failed' | 'lost',
    reason: string,
  ): Promise<void> {
    if (status !== 'stopped') await this.d.jobs.requeueWorker(worker.id, reason);
    await this.d.placer.remove(worker, status, reason);
    this.#suspect.delete(worker.id);
    const level = status === 'stopped' ? 'info' : 'warn';
    this.d.logger[level](
      { endpoint_id: worker.endpointId, worker_id: worker.id, status, reason },
      'endpoint worker removed',
    );
    this.d.dispatcher.kick();
  }

  /** Worker states from their containers and health checks. */
  async #checkWorkers(endpoint: Endpoint, workers: EndpointWorker[]): Promise<void> {
    if (workers.length === 0) return;
    const now = this.d.clock.now().getTime();
    const loads = await this.d.db.sql.query<WorkloadState>(
      'SELECT id, desired, phase, host_unreachable, actual_status FROM workloads WHERE id = ANY($1::text[])',
      [workers.map((w) => w.id)],
    );
    const byId = new Map(loads.map((w) => [w.id, w]));
    // Workers are reached through their agent: while it is away, health checks would only measure that.
    const hosts = await this.d.db.sql.query<{ id: string }>(
      `SELECT id FROM hosts WHERE id = ANY($1::text[]) AND state = 'ready' AND connected_replica_id IS NOT NULL`,
      [[...new Set(workers.map((w) => w.hostId))]],
    );
    const reachable = new Set(hosts.map((h) => h.id));
    await Promise.all(
      workers.map(async (worker) => {
        const load = byId.get(worker.id);
        if (load) await this.#startBilling(worker, load);
        if (!load || load.desired === 'deleted')
          return this.#remove(worker, 'failed', 'its container was removed');
        if (load.host_unreachable) return this.#remove(worker, 'lost', 'its host is unreachable');
        if (load.phase === 'failed') {
          return this.#remove(
            worker,
            'failed',
            `container could not start: ${load.actual_status?.error ?? 'unknown error'}`,
          );
        }
        if (load.phase === 'exited') {
          const code = load.actual_status?.exitCode;
          return this.#remove(
            worker,
            'failed',
            `container exited${code === null || code === undefined ? '' : ` with code ${code}`}`,
          );
        }
        if (worker.status === 'starting') {
          if (now - worker.createdAt.getTime() > this.#o.startupTimeoutMs) {
            return this.#remove(
              worker,
              'failed',
              `not ready within ${Math.round(this.#o.startupTimeoutMs / 1000)} s`,
            );
          }
          if (load.phase !== 'running' || !reachable.has(worker.hostId)) return;
          // A RunPod-protocol worker becomes ready at its first contact with the worker API.
          if (endpoint.workerProtocol === 'runpod') return;
          return this.#probe(endpoint, worker, true);
        }
        if (worker.status === 'draining') {
          const [busy] = await this.d.db.sql.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM endpoint_jobs WHERE worker_id = $1 AND status = 'IN_PROGRESS'`,
            [worker.id],
          );
          if ((busy?.n ?? 0) === 0) return this.#remove(worker, 'stopped', 'drained');
        }
        if (!reachable.has(worker.hostId)) return;
        if (endpoint.workerProtocol === 'runpod') return this.#checkSilence(worker, now);
        const due = !worker.lastProbeAt || now - worker.lastProbeAt.getTime() >= this.#o.probeIntervalMs;
        if (due || this.#suspect.has(worker.id)) return this.#probe(endpoint, worker, false);
      }),
    );
  }

  /** The worker's uptime is billed from when its container started (billing/worker-sessions.ts). */
  async #startBilling(worker: EndpointWorker, load: WorkloadState): Promise<void> {
    if (worker.billingStartedAt) return;
    const start = billingStartOf(load.actual_status?.startedAt, worker.createdAt, this.d.clock.now());
    if (!start) return;
    await openWorkerSession(this.d.db.prisma, worker.id, start);
    worker.billingStartedAt = start;
  }

  async #probe(endpoint: Endpoint, worker: EndpointWorker, starting: boolean): Promise<void> {
    this.#suspect.delete(worker.id);
    const result = await this.d.client.probe(worker.id, endpoint.workerPort, this.#o.probeTimeoutMs);
    const now = this.d.clock.now();
    if (result.ok) {
      await this.d.db.prisma.endpointWorker.updateMany({
        where: { id: worker.id, status: worker.status },
        data: {
          ...(starting ? { status: 'ready', readyAt: now } : {}),
          probeFailures: 0,
          lastProbeAt: now,
          lastProbeMs: result.ms,
          lastProbeError: null,
          updatedAt: now,
        },
      });
      if (starting) {
        this.d.logger.info({ endpoint_id: endpoint.id, worker_id: worker.id }, 'endpoint worker ready');
        this.d.dispatcher.kick();
      }
      return;
    }
    const failures = starting ? worker.probeFailures : worker.probeFailures + 1;
    await this.d.db.prisma.endpointWorker.updateMany({
      where: { id: worker.id, status: worker.status },
      data: {
        probeFailures: failures,
        lastProbeAt: now,
        lastProbeMs: result.ms,
        lastProbeError: result.error,
        updatedAt: now,
      },
    });
    // A starting worker may take long to load its model: only the startup timeout fails it.
    if (!starting && failures >= this.#o.probeFailures) {
      await this.#remove(worker, 'failed', `GET /health failed ${failures} times in a row: ${result.error}`);
    }
  }

  /**
   * A RunPod-protocol worker's liveness is its own contact (pings every RUNPOD_PING_INTERVAL, takes):
   * silent for RUNPOD_SILENCE_MS while its agent is connected, it is failed and replaced (its jobs queued again).
   */
  async #checkSilence(worker: EndpointWorker, now: number): Promise<void> {
    const last = (worker.lastProbeAt ?? worker.readyAt ?? worker.createdAt).getTime();
    if (now - last < RUNPOD_SILENCE_MS) return;
    await this.#remove(
      worker,
      'failed',
      `no ping nor job-take from the worker for ${Math.round((now - last) / 1000)} s`,
    );
  }

  /** The worker count to converge to: workerCount, or the autoscaler's decision (stored with its state). */
  async #target(endpoint: Endpoint): Promise<number> {
    const config = configurationOf(endpoint);
    if (!config.autoScaling.enabled) {
      if (endpoint.targetWorkers !== config.workerCount) {
        await this.d.db.prisma.endpoint.updateMany({
          where: { id: endpoint.id },
          data: { targetWorkers: config.workerCount },
        });
      }
      return config.workerCount;
    }
    const counts = await this.d.jobs.counts(endpoint.id);
    const decision = decideScale({
      autoScaling: config.autoScaling,
      maxConcurrency: config.maxConcurrency,
      current: endpoint.targetWorkers,
      queued: counts.queued,
      inProgress: counts.inProgress,
      nowMs: this.d.clock.now().getTime(),
      state: endpoint.scaleState as ScaleState,
    });
    if (
      decision.target !== endpoint.targetWorkers ||
      JSON.stringify(decision.state) !== JSON.stringify(endpoint.scaleState)
    ) {
      await this.d.db.prisma.endpoint.updateMany({
        where: { id: endpoint.id, deletedAt: null },
        data: { targetWorkers: decision.target, scaleState: decision.state as Prisma.InputJsonValue },
      });
      if (decision.target !== endpoint.targetWorkers) {
        this.d.logger.info(
          {
            endpoint_id: endpoint.id,
            from: endpoint.targetWorkers,
            to: decision.target,
            ...counts,
            reason: decision.reason,
          },
          'endpoint autoscaled',
        );
      }
    }
    return decision.target;
  }

  /** Starts missing workers, drains surplus ones and, after an update, old-configuration ones. */
  async #adjust(endpoint: Endpoint, target: number): Promise<void> {
    const live = await this.#liveWorkers(endpoint.id);
    const active = live.filter((w) => w.status !== 'draining');
    const current = active.filter((w) => w.configVersion === endpoint.configVersion);
    const old = active.filter((w) => w.configVersion !== endpoint.configVersion);
    const busy = await this.#busyByWorker(endpoint.id);
    // Surplus first goes from the workers doing least: starting ones, then idle ready ones.
    const byLeastBusy = (list: EndpointWorker[]) =>
      [...list].sort(
        (a, b) =>
          Number(a.status === 'ready') - Number(b.status === 'ready') ||
          (busy.get(a.id) ?? 0) - (busy.get(b.id) ?? 0) ||
          b.createdAt.getTime() - a.createdAt.getTime(),
      );
    if (current.length > target) {
      for (const worker of byLeastBusy(current).slice(0, current.length - target))
        await this.#drain(worker, busy);
    }
    const readyCurrent = current.filter((w) => w.status === 'ready').length;
    const keepOld = Math.max(0, target - readyCurrent);
    if (old.length > keepOld) {
      for (const worker of byLeastBusy(old).slice(0, old.length - keepOld)) await this.#drain(worker, busy);
    }
    const missing = target - current.length;
    if (missing <= 0 || (await this.#pausedByFailures(endpoint))) return;
    for (let i = 0; i < missing; i += 1) {
      const outcome = await this.d.placer.place(endpoint);
      if (outcome.kind !== 'placed') {
        const reason =
          outcome.kind === 'busy'
            ? `waiting for ${endpoint.gpuCount} x ${endpoint.gpuType} to free up`
            : `no host has ${endpoint.gpuCount} x ${endpoint.gpuType}`;
        if (endpoint.statusReason !== reason) {
          await this.d.db.prisma.endpoint.updateMany({
            where: { id: endpoint.id },
            data: { statusReason: reason },
          });
          endpoint.statusReason = reason;
        }
        return;
      }
      this.d.logger.info(
        { endpoint_id: endpoint.id, worker_id: outcome.worker.id, host_id: outcome.worker.hostId },
        'endpoint worker placed',
      );
    }
  }

  async #busyByWorker(endpointId: string): Promise<Map<string, number>> {
    const rows = await this.d.db.sql.query<{ worker_id: string; n: number }>(
      `SELECT worker_id, count(*)::int AS n FROM endpoint_jobs
        WHERE endpoint_id = $1 AND status = 'IN_PROGRESS' AND worker_id IS NOT NULL GROUP BY worker_id`,
      [endpointId],
    );
    return new Map(rows.map((r) => [r.worker_id, r.n]));
  }

  /** A starting or idle worker goes at once; a busy one stops taking jobs and goes when they finish. */
  async #drain(worker: EndpointWorker, busy: Map<string, number>): Promise<void> {
    if (worker.status === 'starting' || (busy.get(worker.id) ?? 0) === 0) {
      await this.#remove(worker, 'stopped', 'scaled down or replaced');
      return;
    }
    await this.d.db.prisma.endpointWorker.updateMany({
      where: { id: worker.id, status: 'ready' },
      data: { status: 'draining', updatedAt: this.d.clock.now() },
    });
  }

  /** Workers that failed in a row since the last one became ready (or since the configuration changed). */
  async #recentFailures(endpoint: Endpoint): Promise<{ count: number; last: EndpointWorker | null }> {
    const lastReady = await this.d.db.prisma.endpointWorker.findFirst({
      where: { endpointId: endpoint.id, readyAt: { not: null }, configVersion: endpoint.configVersion },
      orderBy: { readyAt: 'desc' },
    });
    const since = lastReady?.readyAt ?? new Date(0);
    const failed = await this.d.db.prisma.endpointWorker.findMany({
      where: {
        endpointId: endpoint.id,
        status: 'failed',
        configVersion: endpoint.configVersion,
        createdAt: { gt: since },
      },
      orderBy: { stoppedAt: 'desc' },
      take: this.#o.errorAfterFailures,
    });
    return { count: failed.length, last: failed[0] ?? null };
  }

  async #pausedByFailures(endpoint: Endpoint): Promise<boolean> {
    const { count, last } = await this.#recentFailures(endpoint);
    if (count < this.#o.errorAfterFailures || !last?.stoppedAt) return false;
    return this.d.clock.now().getTime() - last.stoppedAt.getTime() < this.#o.errorBackoffMs;
  }

  async #updateStatus(endpoint: Endpoint, target: number): Promise<void> {
    const live = await this.#liveWorkers(endpoint.id);
    const active = live.filter((w) => w.status !== 'draining');
    const ready = active.filter((w) => w.status === 'ready');
    const current = active.filter((w) => w.configVersion === endpoint.configVersion);
    const readyCurrent = current.filter((w) => w.status === 'ready').length;
    const old = live.filter((w) => w.configVersion !== endpoint.configVersion);
    const failures = await this.#recentFailures(endpoint);
    let status: EndpointStatus;
    let reason: string | null = endpoint.statusReason;
    if (failures.count >= this.#o.errorAfterFailures && ready.length === 0 && target > 0) {
      status = 'error';
      reason = `${failures.count} workers failed in a row; the last: ${failures.last?.statusReason ?? 'unknown'}`;
    } else if (endpoint.status === 'updating' && (old.length > 0 || readyCurrent < target)) {
      status = 'updating';
    } else if (target === 0 && live.length === 0) {
      status = 'inactive';
      reason = null;
    } else if (ready.length > 0) {
      status = 'active';
      if (current.length >= target) reason = null;
    } else {
      status = 'pending';
      if (current.length > 0 && current.length >= target) reason = `starting ${current.length} worker(s)`;
    }
    if (status !== endpoint.status || reason !== endpoint.statusReason) {
      // Entering `error` records endpoint.failed in the same transaction: the event exists if and only if
      // the change committed, whichever replica made it (the outbox delivers it with retries).
      await this.d.db.prisma.$transaction(async (tx) => {
        const changed = await tx.endpoint.updateMany({
          where: {
            id: endpoint.id,
            deletedAt: null,
            configVersion: endpoint.configVersion,
            status: endpoint.status,
          },
          data: { status, statusReason: reason },
        });
        if (changed.count === 1 && status === 'error' && endpoint.status !== 'error' && endpoint.accountId) {
          await enqueueWebhookEvent(tx, {
            accountId: endpoint.accountId,
            type: ENDPOINT_FAILED_EVENT,
            data: {
              endpoint_id: endpoint.id,
              name: endpoint.name,
              status,
              previous_status: endpoint.status,
              reason,
              failed_workers: failures.count,
            },
          });
        }
      });
      if (status !== endpoint.status) {
        this.d.logger.info(
          { endpoint_id: endpoint.id, from: endpoint.status, to: status, reason },
          'endpoint status',
        );
      }
    }
  }
}

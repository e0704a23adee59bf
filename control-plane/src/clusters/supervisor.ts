import type { WorkloadStatus } from '@anvil/shared/protocol';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import type { Allocator } from '../scheduler/allocator.ts';
import { PassLoop } from '../util/pass-loop.ts';
import type { DeleteOptions } from './operation.ts';
import type { ClusterOperations } from './operations.ts';
import type { ClusterService } from './service.ts';

/** Announced by a trigger when a cluster is created or its status changes (migration 20261128001900). */
const CLUSTER_STATUS_CHANNEL = 'anvil_cluster_status';

export interface SupervisorOptions {
  /** Pass interval while some cluster is in a transition (starting, pending, stopping, deleting). */
  busyIntervalMs?: number;
  /**
   * The safety sweep: the longest wait with no cluster in a transition. Otherwise the supervisor sleeps
   * until the soonest expires_at, or a kick: an operation accepted here, a container's state reported to
   * this process (it exited), a cluster's status changed anywhere (NOTIFY of migration 20261128001900).
   */
  idleIntervalMs?: number;
  /** How often the capacity index is rebuilt from inventories while clusters are pending. */
  capacitySyncMs?: number;
}

/** Delete options for an expired cluster (expires_at is its auto-termination time). */
export const EXPIRY_DELETE: DeleteOptions = {
  force: false,
  create_final_snapshot: false,
  snapshot_name: null,
  preserve_snapshots: true,
  delete_snapshots: false,
  finalize_billing: true,
  cleanup_network_resources: true,
  wait_for_completion: false,
  timeout_minutes: 10,
  deletion_reason: 'expired: expires_at reached',
};

/**
 * The loop that moves clusters along from what the database says, so nothing depends on a promise
 * held in memory and a restarted control plane (or another replica) carries everything on:
 * starting → running once the agent reports the container running (billing starts then), starting or
 * running → error when the image cannot be pulled or the container exits, pending clusters placed
 * oldest first when capacity frees or appears, expired clusters deleted, stop and delete phases run.
 */
export class ClusterSupervisor {
  readonly #loop: PassLoop<number>;
  #unlisten: (() => Promise<void>) | null = null;
  #started = false;
  #lastSync = 0;
  readonly #inFlight = new Set<string>();
  readonly #busyMs: number;
  readonly #idleMs: number;
  readonly #syncMs: number;

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      service: ClusterService;
      operations: ClusterOperations;
      allocator: Allocator;
      logger: Logger;
    },
    options: SupervisorOptions = {},
  ) {
    this.#busyMs = options.busyIntervalMs ?? 100;
    this.#idleMs = options.idleIntervalMs ?? safetySweepMs(d.db);
    this.#syncMs = options.capacitySyncMs ?? 3_000;
    this.#loop = new PassLoop({
      run: (kicked) => this.#pass(kicked),
      after: (delayMs) => delayMs,
      // A failure (the database away) is retried soon, not at the sweep.
      failedMs: 1_000,
      onError: (error) => this.d.logger.error({ err: error }, 'cluster supervisor pass failed'),
    });
  }

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#loop.start();
    void this.d.db
      .listen(CLUSTER_STATUS_CHANNEL, () => this.#loop.kick())
      .then(
        (unlisten) => {
          if (this.#started) this.#unlisten = unlisten;
          else void unlisten();
        },
        (error: unknown) => this.d.logger.error({ err: error }, 'cluster supervisor could not listen'),
      );
  }

  async stop(): Promise<void> {
    this.#started = false;
    await this.#unlisten?.();
    this.#unlisten = null;
    await this.#loop.stop();
  }

  /** The pass loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.#loop.passes, wakeAt: this.#loop.wakeAt };
  }

  /** One pass of the loop; resolves to the delay before the next. */
  async #pass(kicked: boolean): Promise<number> {
    if (await this.pass(kicked)) return this.#busyMs;
    // Nothing in a transition: the next thing due is the soonest expiry (or a kick).
    const [row] = await this.d.db.sql.query<{ at: Date | string | null }>(
      `SELECT min(expires_at) AS at FROM clusters
        WHERE deleted_at IS NULL AND expires_at IS NOT NULL AND status <> 'deleting'`,
      [],
      'cluster_supervisor_next_expiry',
    );
    const at = row?.at ? new Date(row.at).getTime() - this.d.clock.now().getTime() : Number.POSITIVE_INFINITY;
    return Math.max(0, Math.min(at, this.#idleMs));
  }

  /** Something changed (capacity freed, an operation accepted): run a pass soon. */
  kick(): void {
    this.#loop.kick();
  }

  /**
   * One pass; true while some cluster is in a transition. `kicked`: something changed since the last
   * pass, so pending placement re-reads capacity now rather than at its sync interval (direct calls
   * count as kicked).
   */
  async pass(kicked = true): Promise<boolean> {
    const now = this.d.clock.now();
    const rows = await this.d.db.prisma.$queryRawUnsafe<
      {
        id: string;
        status: string;
        phase: string | null;
        desired: string | null;
        actual_status: WorkloadStatus | null;
        expired: boolean;
      }[]
    >(
      `SELECT c.id, c.status, w.phase, w.desired, w.actual_status, (c.expires_at IS NOT NULL AND c.expires_at <= $1) AS expired
         FROM clusters c LEFT JOIN workloads w ON w.id = c.id
        WHERE c.deleted_at IS NULL AND (
          c.status IN ('pending', 'starting', 'stopping', 'deleting')
          OR (c.status = 'running' AND w.phase IN ('exited', 'failed'))
          OR (c.status = 'error' AND w.desired = 'running')
          OR (c.expires_at IS NOT NULL AND c.expires_at <= $1))
        ORDER BY c.created_at, c.id LIMIT 500`,
      now,
    );
    let pending = false;
    for (const row of rows) {
      if (row.expired && row.status !== 'deleting') {
        const cluster = await this.d.service.row(row.id).catch(() => null);
        if (cluster && (await this.d.service.beginDelete(cluster, EXPIRY_DELETE))) {
          this.d.logger.info({ clusterId: row.id }, 'cluster expired: deleting it');
        }
        continue;
      }
      switch (row.status) {
        case 'pending':
          pending = true;
          break;
        case 'starting':
          await this.starting(row.id, row.phase, row.desired, row.actual_status);
          break;
        case 'running':
          await this.d.service.fail(row.id, failureReason(row.phase, row.actual_status));
          break;
        case 'error':
          // Failed, but its container could not be set to stopped when it failed: tried again.
          await this.d.service.stopFailedContainer(row.id, null);
          break;
        case 'stopping':
        case 'deleting':
          this.#operate(row.id);
          break;
      }
    }
    if (pending) await this.placePending(kicked);
    // A failed cluster's container that would not stop is no transition: it is retried at the passes that
    // come anyway (a kick, an expiry, the idle interval), not every busy interval.
    return rows.some((row) => row.status !== 'error' || row.expired);
  }

  private async starting(
    id: string,
    phase: string | null,
    desired: string | null,
    actual: WorkloadStatus | null,
  ): Promise<void> {
    if (phase === null || desired !== 'running') {
      await this.d.service.ensureWorkload(id);
      return;
    }
    if (phase === 'running') {
      await this.markRunning(id);
      return;
    }
    if (phase === 'failed' || phase === 'exited') await this.d.service.fail(id, failureReason(phase, actual));
  }

  /**
   * starting → running, opening the billing session: the agent reported the container running. Called by
   * the pass, and at once when the agent's report arrives (so a create is not held up by the pass's timer);
   * a report counts only from the host the cluster is placed on.
   */
  async markRunning(id: string, fromHostId?: string): Promise<void> {
    const now = this.d.clock.now();
    const started = await this.d.db.prisma.cluster.updateMany({
      where: { id, status: 'starting', ...(fromHostId ? { hostId: fromHostId } : {}) },
      data: { status: 'running', statusReason: null, sessionStartedAt: now, updatedAt: now },
    });
    if (started.count > 0) this.d.logger.info({ clusterId: id }, 'cluster running: billing session opened');
  }

  #operate(id: string): void {
    if (this.#inFlight.has(id)) return;
    this.#inFlight.add(id);
    this.d.operations
      .advance(id)
      .catch((error: unknown) =>
        this.d.logger.error({ err: error, clusterId: id }, 'cluster operation failed'),
      )
      .finally(() => {
        this.#inFlight.delete(id);
      });
  }

  /** Pending clusters, oldest first; the capacity index is rebuilt now and then so new hosts are seen. */
  private async placePending(kicked: boolean): Promise<void> {
    const nowMs = this.d.clock.now().getTime();
    if (!kicked && nowMs - this.#lastSync < this.#syncMs) return;
    this.#lastSync = nowMs;
    await this.d.allocator.sync();
    const pending = await this.d.db.prisma.cluster.findMany({
      where: { status: 'pending', deletedAt: null },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      select: { id: true, gpuType: true, gpuCount: true, region: true, hostId: true },
      take: 100,
    });
    // Fairness: once an older cluster could not be placed, a younger one asking for as many GPUs of the same
    // type in the same region waits behind it (a capacity freed mid-pass goes to the oldest); smaller
    // requests may still fill the gaps. The placement statement holds every create and replica to the same
    // order, and to the queue heads' reservations (scheduler/reservations.ts); skipping here saves attempts.
    // The queue is first drained in one statement; only what that left goes one by one (queued, reserved).
    const placed = await this.d.service.placeBatch(pending.map(({ id }) => id));
    for (const id of placed) this.d.logger.info({ clusterId: id }, 'pending cluster placed');
    const smallestUnplaced = new Map<string, number>();
    for (const { id, gpuType, gpuCount, region, hostId } of pending) {
      if (placed.has(id)) continue;
      // A restart pinned to its host waits for that host only: it holds up no one else's queue.
      const key = `${gpuType}\u0000${hostId === null ? (region ?? '') : `host\u0000${hostId}`}`;
      const blocking = smallestUnplaced.get(key);
      if (blocking !== undefined && gpuCount >= blocking) continue;
      if (await this.d.service.placePending(id)) {
        this.d.logger.info({ clusterId: id }, 'pending cluster placed');
      } else {
        smallestUnplaced.set(key, Math.min(blocking ?? Number.POSITIVE_INFINITY, gpuCount));
      }
    }
  }
}

function failureReason(phase: string | null, actual: WorkloadStatus | null): string {
  if (phase === 'failed') return `container could not be started: ${actual?.error ?? 'unknown error'}`;
  const code = actual?.exitCode;
  return `container exited${code === null || code === undefined ? '' : ` with code ${code}`}`;
}

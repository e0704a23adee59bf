import type { Clock } from '../auth/clock.ts';
import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { hasUnindexedHosts, lockHost, refreshHost, syncCapacity } from './capacity.ts';
import type { GpuType } from './gpu-types.ts';
import type { Placement, PlacementRequest } from './placement.ts';
import {
  BATCH_FUNCTION_SQL,
  BATCH_SQL,
  type PlacementRow,
  placementStatement,
  requestParams,
} from './placement-sql.ts';
import { DROP_RESERVATION_SQL, queueAndReserve } from './reservations.ts';

type Tx = Prisma.TransactionClient;

/**
 * Interactive transactions here wait for row locks; on a loaded machine Prisma's default 5 s can pass
 * while the lock holder is merely slow, so they get more room.
 */
export const TX_OPTIONS = { maxWait: 10_000, timeout: 30_000 } as const;

export type AllocationOutcome =
  | { kind: 'placed'; placement: Placement; hourlyRate: number }
  /** Capacity exists in the fleet but is taken (or its hosts are cordoned or unreachable, or reserved): wait. */
  | { kind: 'busy' }
  /** No host could ever fit the request. */
  | { kind: 'impossible'; availableGpuTypes: GpuType[] }
  /** The cluster is no longer waiting for a placement (deleted, or placed by another replica). */
  | { kind: 'gone' };

/** The most calls of allocateJoined placed in one statement. */
const JOIN_LIMIT = 100;

/** The batch function is missing on this connection: undefined_function, or no pg_temp schema yet. */
const NOT_CREATED_YET: unknown[] = ['42883', '3F000'];
const DEADLOCK_DETECTED = '40P01';

function errorCode(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code;
}

function placedOutcome(row: PlacementRow): AllocationOutcome | null {
  if (row.host_id === null || row.gpu_indices === null) return null;
  const uuids = row.gpu_uuids ?? [];
  return {
    kind: 'placed',
    placement: {
      hostId: row.host_id,
      gpus: row.gpu_indices.map((index, i) => ({ index, uuid: uuids[i] ?? '' })),
    },
    hourlyRate: Number(row.hourly_rate ?? 0),
  };
}

/**
 * Could any host, empty, fit the request (busy), and which GPU types are there (for impossible)?
 * $1..$7: requestParams.
 */
const CLASSIFY_SQL = `
  SELECT EXISTS (
           SELECT 1 FROM host_capacity c JOIN hosts h ON h.id = c.host_id
            WHERE h.deleted_at IS NULL AND c.gpu_type = $1::text AND cardinality(c.gpu_indices) >= $2::int
              AND ($6::text IS NULL OR h.region = $6::text) AND ($7::text IS NULL OR c.host_id = $7::text)
              AND (c.cpu_threads IS NULL OR c.cpu_threads >= $3::int)
              AND (c.memory_gb IS NULL OR c.memory_gb >= $4::int)
              AND (c.disk_gb IS NULL OR c.disk_gb >= $5::int)) AS could_fit,
         ARRAY(SELECT DISTINCT c.gpu_type FROM host_capacity c JOIN hosts h ON h.id = c.host_id
                WHERE h.deleted_at IS NULL AND cardinality(c.gpu_indices) > 0
                  AND ($6::text IS NULL OR h.region = $6::text)
                ORDER BY 1) AS gpu_types`;

/**
 * Commits placements (DESIGN.md, Scheduling). A placement is one SQL statement (placement-sql.ts) that
 * picks the best-fit host, locks its capacity rows, takes its lowest free GPU indices and moves the
 * cluster to starting, so two creates — on this replica or another — never get the same GPU, and the
 * hot path costs one round trip. Pending clusters queue and reserve capacity (reservations.ts).
 */
export class Allocator {
  readonly #joining: {
    item: { clusterId: string; request: PlacementRequest };
    resolve: (outcome: AllocationOutcome) => void;
    reject: (error: unknown) => void;
  }[] = [];
  #flushing = false;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  #syncing: Promise<void> | null = null;
  #syncAgain: Promise<void> | null = null;

  /**
   * Brings the capacity rows in line (capacity.ts). Calls made while one runs share the next one, which
   * starts when it ends (the running one may have read before the caller's change): parallel creates that
   * all found a new host unindexed would otherwise queue one table-locking sync each.
   */
  sync(): Promise<void> {
    if (!this.#syncing) return this.#startSync();
    this.#syncAgain ??= this.#syncing
      .catch(() => {})
      .then(() => {
        this.#syncAgain = null;
        return this.#startSync();
      });
    return this.#syncAgain;
  }

  #startSync(): Promise<void> {
    const run = syncCapacity(this.db).finally(() => {
      if (this.#syncing === run) this.#syncing = null;
    });
    this.#syncing = run;
    return run;
  }

  /**
   * Places the pending cluster `clusterId`: one statement when a host has room. When none has: impossible
   * if no host could ever fit it, else busy — then it is queued, and reserves a host if it heads its
   * queue. Before concluding, the capacity rows are synced once if hosts joined since the last sync (or
   * on impossible, in case an inventory grew), and the attempt is repeated.
   */
  async allocate(clusterId: string, request: PlacementRequest): Promise<AllocationOutcome> {
    for (let synced = false; ; synced = true) {
      const outcome = await this.place(clusterId, request);
      if (outcome !== 'busy' && outcome !== 'impossible') return outcome;
      if (!synced && (outcome === 'impossible' || (await hasUnindexedHosts(this.db)))) {
        await this.sync();
        continue;
      }
      const verdict = outcome === 'impossible' ? await this.classify(request) : { kind: 'busy' as const };
      if (verdict.kind === 'busy') await queueAndReserve(this.db, clusterId, this.clock.now());
      return verdict;
    }
  }

  /**
   * Places pending clusters in the order given (oldest first when draining a queue) in one statement and
   * one commit (placement-sql.ts, batches); each sees the allocations of those before it, under the same
   * rules as `allocate`. Those the batch could not place (busy, impossible, gone, or a host locked at that
   * moment) then go through `allocate` one by one, which waits for locked hosts, syncs, classifies and
   * queues them. Outcomes are in the order of `items`.
   */
  async allocateMany(
    items: readonly { clusterId: string; request: PlacementRequest }[],
  ): Promise<AllocationOutcome[]> {
    const batch = await this.placeInOrder(items);
    const outcomes: AllocationOutcome[] = [];
    for (const [i, item] of items.entries()) {
      outcomes.push(batch[i] ?? (await this.allocate(item.clusterId, item.request)));
    }
    return outcomes;
  }

  /**
   * `allocate` for callers that arrive together (parallel creates): a call made while this allocator's
   * batch statement is in flight waits for it and then goes, with every call that arrived meanwhile, as the
   * next batch (up to JOIN_LIMIT), in arrival order — group commit for placements. A lone call goes at once,
   * so it waits for nothing when nothing else runs. What a batch does not place goes through `allocate`.
   */
  allocateJoined(clusterId: string, request: PlacementRequest): Promise<AllocationOutcome> {
    return new Promise((resolve, reject) => {
      this.#joining.push({ item: { clusterId, request }, resolve, reject });
      if (!this.#flushing) void this.#flush();
    });
  }

  async #flush(): Promise<void> {
    this.#flushing = true;
    try {
      while (this.#joining.length > 0) {
        const group = this.#joining.splice(0, JOIN_LIMIT);
        if (group.length === 1) {
          // Alone: the single prepared statement is the cheaper round trip.
          const [{ item, resolve, reject }] = group as [(typeof group)[number]];
          await this.allocate(item.clusterId, item.request).then(resolve, reject);
          continue;
        }
        let batch: (AllocationOutcome | null)[];
        try {
          batch = await this.placeInOrder(group.map(({ item }) => item));
        } catch (error) {
          for (const { reject } of group) reject(error);
          continue;
        }
        // The rest wait, queue and reserve one by one, without holding up the next batch.
        for (const [i, { item, resolve, reject }] of group.entries()) {
          const outcome = batch[i];
          if (outcome) resolve(outcome);
          else this.allocate(item.clusterId, item.request).then(resolve, reject);
        }
      }
    } finally {
      this.#flushing = false;
    }
  }

  /**
   * The batch statement alone: for each item, its placement, `gone` when it was no longer pending, or null
   * when the batch did not place it (all null when the batch deadlocked with another transaction and was
   * rolled back).
   */
  async placeInOrder(
    items: readonly { clusterId: string; request: PlacementRequest }[],
  ): Promise<(AllocationOutcome | null)[]> {
    const rows = items.length === 0 ? [] : await this.batchStatement(items);
    const byPosition = new Map(rows?.map((row) => [row.n, row]));
    return items.map((_, i) => {
      const row = byPosition.get(i + 1);
      if (!row) return null;
      if (row.waiting === 0) return { kind: 'gone' };
      return placedOutcome(row);
    });
  }

  /** Runs the batch on one connection, creating its function there first when that connection lacks it. */
  private async batchStatement(
    items: readonly { clusterId: string; request: PlacementRequest }[],
  ): Promise<(PlacementRow & { n: number })[] | null> {
    const column = <T>(of: (request: PlacementRequest) => T) => items.map(({ request }) => of(request));
    const params = [
      items.map(({ clusterId }) => clusterId),
      column((r) => r.gpuType),
      column((r) => r.gpuCount),
      column((r) => r.cpuCores),
      column((r) => r.memoryGb),
      column((r) => r.storageGb),
      column((r) => r.region),
      column((r) => r.hostId),
      this.clock.now(),
    ];
    try {
      return await this.db.session(async (sql) => {
        try {
          return await sql.query<PlacementRow & { n: number }>(BATCH_SQL, params);
        } catch (error) {
          if (!NOT_CREATED_YET.includes(errorCode(error))) throw error;
          await sql.query(BATCH_FUNCTION_SQL);
          return await sql.query<PlacementRow & { n: number }>(BATCH_SQL, params);
        }
      });
    } catch (error) {
      if (errorCode(error) === DEADLOCK_DETECTED) return null;
      throw error;
    }
  }

  /** One placement statement (then, on PostgreSQL, one that waits for hosts locked at that moment). */
  private async place(
    clusterId: string,
    request: PlacementRequest,
  ): Promise<AllocationOutcome | 'busy' | 'impossible'> {
    const params = [clusterId, ...requestParams(request), this.clock.now()];
    // PGlite has one connection: no other placement can hold a lock while this one runs.
    const waits = this.db.kind === 'pglite' ? [false] : [false, true];
    let couldFit = false;
    for (const waitForLocks of waits) {
      const { name, text } = placementStatement({
        waitForLocks,
        region: request.region !== null,
        pinned: request.hostId !== null,
      });
      const [row] = await this.db.sql.query<PlacementRow>(text, params, name);
      if (!row || row.waiting === 0) return { kind: 'gone' };
      const placed = placedOutcome(row);
      if (placed) return placed;
      // A host was locked for it, but the cluster stopped pending in the meantime (deleted, placed elsewhere).
      if (row.picked > 0) return { kind: 'gone' };
      couldFit = row.could_fit === true;
      if (!couldFit) break;
    }
    return couldFit ? 'busy' : 'impossible';
  }

  /** Busy (some host could ever fit) or impossible (none could), with the GPU types there are. */
  async classify(request: PlacementRequest): Promise<AllocationOutcome> {
    const [row] = await this.db.sql.query<{ could_fit: boolean; gpu_types: string[] }>(
      CLASSIFY_SQL,
      requestParams(request),
    );
    if (row?.could_fit) return { kind: 'busy' };
    return { kind: 'impossible', availableGpuTypes: (row?.gpu_types ?? []) as GpuType[] };
  }

  /**
   * Gives a cluster's GPUs back (stop, delete, error) in the caller's transaction: locks the host's
   * capacity (so a placement running at the same moment sees the allocation whole, before or after),
   * clears the allocation and recomputes the host's free GPUs and usage from what still holds them.
   * A reservation the cluster still has is cleared too (DROP_RESERVATION_SQL).
   */
  async release(tx: Tx, clusterId: string): Promise<void> {
    const rows = await tx.$queryRawUnsafe<{ host_id: string | null }[]>(
      'SELECT host_id FROM clusters WHERE id = $1',
      clusterId,
    );
    const hostId = rows[0]?.host_id;
    if (hostId) {
      await lockHost(tx, hostId);
      await tx.$executeRawUnsafe(
        `UPDATE clusters SET gpu_indices = '{}', updated_at = $2 WHERE id = $1`,
        clusterId,
        this.clock.now(),
      );
      await refreshHost(tx, hostId);
    }
    await tx.$executeRawUnsafe(DROP_RESERVATION_SQL, clusterId);
  }
}

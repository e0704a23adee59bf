import type { Database } from '../db/index.ts';

/**
 * Queues and reservations: how a pending cluster keeps its place (design; the OpenAPI description of
 * cluster create says the same to customers).
 *
 * - Queue: a pending cluster is queued once a placement attempt found no room for it (clusters.queued_at).
 *   Queued clusters not pinned to a host form one queue per GPU type and requested region (no region is
 *   a queue of its own), oldest first (created_at, id).
 * - FIFO: no cluster is placed ahead of an older queued cluster of its queue asking for as many GPUs or
 *   fewer; a smaller request may go around a larger older one (placement-sql.ts).
 * - Reservation: the head of each queue reserves one host, so a large request is not starved by small
 *   ones taking every GPU that frees. The host: among ready, uncordoned hosts of its region that could
 *   ever fit it (GPU type and count, CPU, memory, disk totals) and are not reserved for another pending
 *   cluster, the one whose needed GPUs are expected to free soonest: a host with enough GPUs of its type
 *   free now (held up only by CPU, memory or disk) counts as now; otherwise the moment the clusters there
 *   that end on their own (expires_at, the auto-termination time) will have freed enough, earliest ends
 *   first (FREES_AT). Hosts where that is unknown (it would take clusters without expires_at, which run
 *   until stopped, or other workloads) come after all those, ordered by the most free GPUs of its type now,
 *   i.e. the nearest to fitting; last ties by host id. The reservation stays on that host while it stays
 *   ready and able to fit the request, so it does not chase GPUs across the fleet.
 * - Backfill: on a reserved host, any other cluster (of any queue or shape, restarts pinned there
 *   included) may take only what the reservation does not need: after it the host must still have the
 *   reserved GPU count of the reserved type free and the reserved CPU, memory and disk headroom. So GPUs
 *   that free on the reserved host wait for the reserving cluster, which is placed as soon as that host —
 *   or any other — fits it. Small requests queued behind it wait too, or go to other hosts.
 * - Pinned clusters (a stopped cluster started again goes back to the host holding its volume): each
 *   waits for its own host only, so it reserves that host whenever it is not placed, taking the
 *   reservation over from an unpinned queue head (which can wait on another host; it reserves again at
 *   its next attempt) or from a younger pinned cluster of that host (oldest first, by created_at and id),
 *   never from an older pinned one. So GPUs that free on its host wait for it, and requests arriving
 *   later cannot starve it there. A pinned cluster does not block unpinned queues (FIFO) elsewhere.
 * - Lifetime: reservations are rows (host_allocations.reserved_*), so a restart or another replica keeps
 *   them. One counts only while its cluster is pending (and, when pinned, only on its own host): once
 *   the cluster is placed, deleted or stopped it counts for nothing at once, and its row is cleared by the
 *   placement (on the reserved host), by the release of the cluster, or by the next capacity sync.
 */

/** An older queued cluster of the queue of cluster row `k` (which then is not its queue's head). */
const OLDER_QUEUED = `
  SELECT 1 FROM clusters q
   WHERE q.status = 'pending' AND q.queued_at IS NOT NULL AND q.host_id IS NULL AND q.deleted_at IS NULL
     AND q.gpu_type = k.gpu_type AND q.region IS NOT DISTINCT FROM k.region
     AND (q.created_at, q.id) < (k.created_at, k.id)`;

/** A host the head could ever use now: ready, not cordoned, in its region, big enough when empty. */
const SUITABLE = `
  h.deleted_at IS NULL AND h.state = 'ready' AND NOT h.cordoned
  AND (head.region IS NULL OR h.region = head.region)
  AND cardinality(c.gpu_indices) >= head.gpu_count
  AND (c.cpu_threads IS NULL OR c.cpu_threads >= head.cpu_cores)
  AND (c.memory_gb IS NULL OR c.memory_gb >= head.memory_gb)
  AND (c.disk_gb IS NULL OR c.disk_gb >= head.storage_gb)`;

const CLEARED = `reserved_by = NULL, reserved_gpu_type = NULL, reserved_gpu_count = 0, reserved_cpu_cores = 0,
  reserved_memory_gb = 0, reserved_storage_gb = 0, reserved_at = NULL`;

/** Reservation row `a` still counts: its cluster is pending, and pinned to no host or to this one. */
export const RESERVATION_COUNTS = `EXISTS (SELECT 1 FROM clusters r WHERE r.id = a.reserved_by AND r.status = 'pending'
  AND r.deleted_at IS NULL AND (r.host_id IS NULL OR r.host_id = a.host_id))`;

/**
 * Pinned head `head` may take reservation row `a` over: the row's cluster is not an older cluster pinned
 * to the same host (an unpinned queue head can wait elsewhere; a younger pinned cluster waits behind it).
 */
const PINNED_MAY_TAKE = `NOT EXISTS (SELECT 1 FROM clusters r WHERE r.id = a.reserved_by AND r.host_id = a.host_id
  AND (r.created_at, r.id) < (head.created_at, head.id))`;

/**
 * Marks cluster $1 queued (first time only) and drops its reservation when it is no longer the head of
 * its queue or the reserved host no longer suits it. Returns whether it heads its queue and still holds
 * a reservation.
 */
const QUEUE_SQL = `
  WITH me AS MATERIALIZED (
    SELECT k.id, k.created_at, k.gpu_type, k.gpu_count, k.cpu_cores, k.memory_gb, k.storage_gb, k.region, k.host_id
      FROM clusters k WHERE k.id = $1::text AND k.status = 'pending' AND k.deleted_at IS NULL
  ), mark AS (
    UPDATE clusters k SET queued_at = $2::timestamptz
     WHERE k.id = $1::text AND k.status = 'pending' AND k.deleted_at IS NULL AND k.queued_at IS NULL
    RETURNING 1
  ), head AS MATERIALIZED (
    SELECT k.* FROM me AS k WHERE k.host_id IS NOT NULL OR NOT EXISTS (${OLDER_QUEUED})
  ), kept AS MATERIALIZED (
    SELECT a.host_id FROM head
      JOIN host_allocations a ON a.reserved_by = head.id AND (head.host_id IS NULL OR a.host_id = head.host_id)
      JOIN host_capacity c ON c.host_id = a.host_id AND c.gpu_type = head.gpu_type
      JOIN hosts h ON h.id = a.host_id
     WHERE ${SUITABLE}
  ), dropped AS (
    UPDATE host_allocations a SET ${CLEARED}, updated_at = $2::timestamptz
     WHERE a.reserved_by = $1::text AND NOT EXISTS (SELECT 1 FROM kept)
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM head)::int AS head, (SELECT host_id FROM kept LIMIT 1) AS kept,
         (SELECT count(*) FROM mark)::int + (SELECT count(*) FROM dropped)::int AS changed`;

/**
 * When enough GPUs of capacity row `c` for `head` will have freed, as far as is known: the clusters on the
 * host that hold GPUs of that type and have an expires_at (auto-termination) free theirs then, earliest
 * first; the first moment their freed GPUs and the free ones add up to what head asks for. Null when
 * clusters without expires_at (or other workloads) would have to leave too: no one knows when.
 */
const FREES_AT = `
  SELECT min(e.expires_at) AS frees_at FROM (
    SELECT x.expires_at, sum(cardinality(x.gpu_indices)) OVER (ORDER BY x.expires_at, x.id) AS freed
      FROM clusters x
     WHERE x.host_id = c.host_id AND x.gpu_type = c.gpu_type AND cardinality(x.gpu_indices) > 0
       AND x.expires_at IS NOT NULL AND x.deleted_at IS NULL
  ) AS e
   WHERE c.free_count + e.freed >= head.gpu_count`;

/**
 * Reserves a host for queue head $1, or for pinned cluster $1 its own host (see the rules above); returns
 * the host, if one was free to reserve.
 */
const RESERVE_SQL = `
  WITH head AS MATERIALIZED (
    SELECT k.id, k.created_at, k.gpu_type, k.gpu_count, k.cpu_cores, k.memory_gb, k.storage_gb, k.region, k.host_id
      FROM clusters k WHERE k.id = $1::text AND k.status = 'pending' AND k.deleted_at IS NULL
       AND (k.host_id IS NOT NULL OR NOT EXISTS (${OLDER_QUEUED}))
  ), target AS (
    SELECT a.host_id FROM head
      JOIN host_capacity c ON c.gpu_type = head.gpu_type AND (head.host_id IS NULL OR c.host_id = head.host_id)
      JOIN hosts h ON h.id = c.host_id
      JOIN host_allocations a ON a.host_id = c.host_id
     CROSS JOIN LATERAL (${FREES_AT}) AS f
     WHERE ${SUITABLE}
       AND (a.reserved_by IS NULL OR NOT ${RESERVATION_COUNTS}
            OR (head.host_id IS NOT NULL AND ${PINNED_MAY_TAKE}))
     ORDER BY CASE WHEN c.free_count >= head.gpu_count THEN $2::timestamptz ELSE f.frees_at END NULLS LAST,
              c.free_count DESC, c.host_id
     LIMIT 1
     FOR UPDATE OF a SKIP LOCKED
  )
  UPDATE host_allocations a
     SET reserved_by = head.id, reserved_gpu_type = head.gpu_type, reserved_gpu_count = head.gpu_count,
         reserved_cpu_cores = head.cpu_cores, reserved_memory_gb = head.memory_gb,
         reserved_storage_gb = head.storage_gb, reserved_at = $2::timestamptz, updated_at = $2::timestamptz
    FROM target, head
   WHERE a.host_id = target.host_id
  RETURNING a.host_id`;

/**
 * Clears the reservation cluster $1 holds, wherever it is (the cluster stops waiting), unless that row is
 * locked right now: the caller may hold another host's rows, and waiting here could deadlock. A
 * reservation left so counts for nothing already and goes at the next capacity sync.
 */
export const DROP_RESERVATION_SQL = `
  UPDATE host_allocations SET ${CLEARED}, updated_at = now()
   WHERE host_id IN (SELECT host_id FROM host_allocations WHERE reserved_by = $1 FOR UPDATE SKIP LOCKED)`;

function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    code === '23505' ||
    String((error as Error | null)?.message ?? '').includes('host_allocations_reserved_by_key')
  );
}

/**
 * After a placement attempt of pending cluster `clusterId` found no room: queues it and keeps the
 * reservation of its queue's head. Returns the reserved host, or null (not the head, or no host free to
 * reserve: every suitable host is reserved for another queue's head).
 */
export async function queueAndReserve(db: Database, clusterId: string, now: Date): Promise<string | null> {
  const [state] = await db.sql.query<{ head: number; kept: string | null }>(QUEUE_SQL, [clusterId, now]);
  if (!state || state.head === 0) return null;
  if (state.kept !== null) return state.kept;
  try {
    const rows = await db.sql.query<{ host_id: string }>(RESERVE_SQL, [clusterId, now]);
    return rows[0]?.host_id ?? null;
  } catch (error) {
    // Another attempt for the same cluster (its create and the supervisor at once) reserved first.
    if (isUniqueViolation(error)) return null;
    throw error;
  }
}

/** Where cluster `clusterId` holds a reservation that counts, if anywhere. */
export async function reservationOf(db: Database, clusterId: string): Promise<string | null> {
  const rows = await db.sql.query<{ host_id: string }>(
    `SELECT a.host_id FROM host_allocations a WHERE a.reserved_by = $1 AND ${RESERVATION_COUNTS}`,
    [clusterId],
  );
  return rows[0]?.host_id ?? null;
}

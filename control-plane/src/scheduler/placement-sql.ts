import { createHash } from 'node:crypto';
import type { PlacementRequest } from './placement.ts';
import { RESERVATION_COUNTS } from './reservations.ts';

/**
 * The placement statement: one round trip that picks the best-fit host, locks it, takes its lowest free
 * GPU indices and moves the cluster from pending to starting. The rules are those of the pure
 * reference in placement.ts (which the tests hold this statement to); this is how they are committed.
 *
 * Why one statement is safe: the picked host_capacity and host_allocations rows are locked
 * (`FOR UPDATE OF c, a`), and PostgreSQL re-reads a row it locked after a concurrent change and
 * re-checks the conditions on that newest version, so the free indices and usage the statement takes
 * from are never stale. Everything the choice depends on that can change under the lock lives in those
 * two rows: the free GPU indices, the used CPU/memory/disk, and the host's reservation. The capacity
 * rows change only in the statement that changes the cluster: `placed` updates the cluster only while
 * it is still pending, and `taken`/`held` update capacity only from the rows `placed` returned, so
 * capacity is never taken for a cluster row that was not updated (deleted or placed elsewhere meanwhile).
 *
 * Parameters: $1 cluster id, $2 GPU type, $3 GPU count, $4 CPU cores, $5 memory GB, $6 storage GB,
 * $7 region (null: any), $8 pinned host (null: any), $9 now. The variant's flags say which of $7 and $8 are
 * set; the statement checks that the others are null.
 */
function placementSql(variant: PlacementVariant): string {
  return `
WITH me AS MATERIALIZED (
  SELECT k.created_at FROM clusters k WHERE k.id = $1::text AND k.status = 'pending' AND k.deleted_at IS NULL
), pick AS MATERIALIZED (${pickSql(variant, { guard: 'EXISTS (SELECT 1 FROM me)', createdAt: 'me.created_at', fifoFrom: ', me' })}
), placed AS (
  UPDATE clusters k
     SET host_id = p.host_id, gpu_indices = p.idx, status = 'starting', status_reason = NULL, queued_at = NULL,
         region = COALESCE(k.region, p.region),
         hourly_rate = COALESCE((SELECT g.hourly_rate FROM gpu_prices g WHERE g.gpu_type = k.gpu_type), 0) * k.gpu_count,
         updated_at = $9::timestamptz
    FROM pick p
   WHERE k.id = $1::text AND k.status = 'pending' AND k.deleted_at IS NULL
  RETURNING k.host_id, k.gpu_indices, k.hourly_rate, k.cpu_cores, k.memory_gb, k.storage_gb
), ${TAKE_CAPACITY_CTES}
SELECT (SELECT count(*) FROM me)::int AS waiting,
       (SELECT count(*) FROM pick)::int AS picked,
       p.host_id, p.gpu_indices, p.hourly_rate,
       ARRAY(SELECT pk.gpu_uuids[array_position(pk.gpu_indices, i.x)]
               FROM unnest(p.gpu_indices) WITH ORDINALITY AS i(x, n) ORDER BY i.n) AS gpu_uuids,
       -- Not placed: could a host ever fit it (busy) or none (impossible)? Judged on the snapshot the
       -- pick saw, so capacity appearing in between cannot make a miss look busy.
       CASE WHEN p.host_id IS NULL THEN ${couldFitSql(variant)} END AS could_fit
  FROM (SELECT 1) AS one
  LEFT JOIN placed p ON true
  LEFT JOIN pick pk ON true`;
}

/**
 * The body of the `pick` CTE: the best-fit host for the request in $2..$8 (parameters as above), locked
 * (`FOR UPDATE OF c, a`), with the GPU indices it gives (`idx`), the capacity row's indices and UUIDs, and
 * the host's region. `guard` is a condition that must hold for anything to be picked (the cluster is still
 * pending); `createdAt` is the cluster's created_at for the FIFO rule, and `fifoFrom` what the FIFO
 * subquery needs in its FROM list for it. Shared by the placement statement and the create statement
 * (clusters/create-sql.ts), so both place by the same rules.
 */
export function pickSql(
  variant: PlacementVariant,
  at: { guard: string; createdAt: string; fifoFrom: string },
): string {
  const { waitForLocks, region, pinned } = variant;
  return `
  SELECT c.host_id, c.gpu_indices, c.gpu_uuids, c.free_indices[1:$3::int] AS idx, h.region
    FROM host_capacity c
    JOIN hosts h ON h.id = c.host_id
    JOIN host_allocations a ON a.host_id = c.host_id
   WHERE c.gpu_type = $2::text AND c.free_count >= $3::int
     AND ${at.guard}
     AND h.deleted_at IS NULL AND h.state = 'ready' AND NOT h.cordoned
     AND ${region ? 'h.region = $7::text' : '$7::text IS NULL'}
     AND ${pinned ? 'c.host_id = $8::text' : '$8::text IS NULL'}
     AND (c.cpu_threads IS NULL OR a.used_cpu_cores + $4::int <= c.cpu_threads)
     AND (c.memory_gb IS NULL OR a.used_memory_gb + $5::int <= c.memory_gb)
     AND (c.disk_gb IS NULL OR a.used_storage_gb + $6::int <= c.disk_gb)
     -- Backfill on a reserved host only from what the reservation does not need.
     AND (a.reserved_by IS NULL OR a.reserved_by = $1::text
          OR ((a.reserved_gpu_type IS DISTINCT FROM $2::text OR c.free_count - $3::int >= a.reserved_gpu_count)
              AND (c.cpu_threads IS NULL OR a.used_cpu_cores + $4::int + a.reserved_cpu_cores <= c.cpu_threads)
              AND (c.memory_gb IS NULL OR a.used_memory_gb + $5::int + a.reserved_memory_gb <= c.memory_gb)
              AND (c.disk_gb IS NULL OR a.used_storage_gb + $6::int + a.reserved_storage_gb <= c.disk_gb))
          OR NOT ${RESERVATION_COUNTS})
     -- FIFO: not ahead of an older queued cluster of this type and region asking for no more GPUs.
     ${
       pinned
         ? ''
         : `AND NOT EXISTS (
          SELECT 1 FROM clusters q${at.fifoFrom}
           WHERE q.status = 'pending' AND q.queued_at IS NOT NULL AND q.host_id IS NULL AND q.deleted_at IS NULL
             AND q.gpu_type = $2::text AND q.gpu_count <= $3::int AND ${region ? 'q.region = $7::text' : 'q.region IS NULL'}
             AND (q.created_at, q.id) < (${at.createdAt}, $1::text))`
     }
   ORDER BY c.free_count, c.host_id
   LIMIT 1
   FOR UPDATE OF c, a${waitForLocks ? '' : ' SKIP LOCKED'}`;
}

/**
 * Whether some host, empty, could ever fit the request ($2..$8): true means a miss is busy (wait), false
 * impossible.
 */
export function couldFitSql({ region, pinned }: PlacementVariant): string {
  return `EXISTS (
         SELECT 1 FROM host_capacity c2 JOIN hosts h2 ON h2.id = c2.host_id
          WHERE h2.deleted_at IS NULL AND c2.gpu_type = $2::text AND cardinality(c2.gpu_indices) >= $3::int
            AND ${region ? 'h2.region = $7::text' : 'true'} AND ${pinned ? 'c2.host_id = $8::text' : 'true'}
            AND (c2.cpu_threads IS NULL OR c2.cpu_threads >= $4::int)
            AND (c2.memory_gb IS NULL OR c2.memory_gb >= $5::int)
            AND (c2.disk_gb IS NULL OR c2.disk_gb >= $6::int))`;
}

/**
 * CTEs `taken` and `held`: the capacity the clusters of CTE `placed(host_id, cpu_cores, memory_gb,
 * storage_gb)` take on their hosts (its GPU indices from the front of free_indices, its CPU, memory and
 * disk), and the reservation a placed cluster ($1) held there, cleared. Only from rows `placed` returned,
 * so capacity is never taken for a cluster row that was not written.
 */
export const TAKE_CAPACITY_CTES = `taken AS (
  UPDATE host_capacity c
     SET free_indices = c.free_indices[$3::int + 1:], free_count = c.free_count - $3::int, updated_at = $9::timestamptz
    FROM placed p
   WHERE c.host_id = p.host_id AND c.gpu_type = $2::text
), held AS (
  UPDATE host_allocations a
     SET used_cpu_cores = a.used_cpu_cores + p.cpu_cores,
         used_memory_gb = a.used_memory_gb + p.memory_gb,
         used_storage_gb = a.used_storage_gb + p.storage_gb,
         reserved_by = NULLIF(a.reserved_by, $1::text),
         reserved_gpu_type = CASE WHEN a.reserved_by = $1::text THEN NULL ELSE a.reserved_gpu_type END,
         reserved_gpu_count = CASE WHEN a.reserved_by = $1::text THEN 0 ELSE a.reserved_gpu_count END,
         reserved_cpu_cores = CASE WHEN a.reserved_by = $1::text THEN 0 ELSE a.reserved_cpu_cores END,
         reserved_memory_gb = CASE WHEN a.reserved_by = $1::text THEN 0 ELSE a.reserved_memory_gb END,
         reserved_storage_gb = CASE WHEN a.reserved_by = $1::text THEN 0 ELSE a.reserved_storage_gb END,
         reserved_at = CASE WHEN a.reserved_by = $1::text THEN NULL ELSE a.reserved_at END,
         updated_at = $9::timestamptz
    FROM placed p
   WHERE a.host_id = p.host_id
)`;

export interface PlacementVariant {
  /**
   * false: skip hosts another placement holds at this moment, so parallel placements spread over hosts.
   * true: wait for them, used when every host that fits was locked, so busy is never concluded early.
   */
  waitForLocks: boolean;
  /** The request names a region. */
  region: boolean;
  /** The request is pinned to one host (a restart where its volume is). */
  pinned: boolean;
}

/**
 * The request's parameters, in the order every statement here reads them after the cluster id ($2..$8
 * of the placement and create statements): GPU type, count, CPU cores, memory, storage, region, host.
 */
export function requestParams(request: PlacementRequest): unknown[] {
  const { gpuType, gpuCount, cpuCores, memoryGb, storageGb, region, hostId } = request;
  return [gpuType, gpuCount, cpuCores, memoryGb, storageGb, region, hostId];
}

/**
 * The statement for each variant, with its own prepared-statement name. Each variant has a fixed shape
 * (no `$n IS NULL OR …`), so PostgreSQL can plan it once per connection and reuse the plan: planning
 * the generic text cost more than executing it. All eight are built once, at load.
 */
export function placementStatement(variant: PlacementVariant): { name: string; text: string } {
  return STATEMENTS[variantKey(variant)]!;
}

function variantKey({ waitForLocks, region, pinned }: PlacementVariant): number {
  return (waitForLocks ? 4 : 0) + (region ? 2 : 0) + (pinned ? 1 : 0);
}

const STATEMENTS = Array.from({ length: 8 }, (_, key) => {
  const variant = { waitForLocks: (key & 4) !== 0, region: (key & 2) !== 0, pinned: (key & 1) !== 0 };
  const name = `anvil_place_${variant.waitForLocks ? 'wait' : 'skip'}${variant.region ? '_region' : ''}${variant.pinned ? '_pinned' : ''}`;
  return { name, text: placementSql(variant) };
});

/**
 * Batches: a queue drained as one statement. The placement statement is wrapped in a PL/pgSQL function
 * (one branch per region/pinned variant, skipping locked hosts), which PostgreSQL plans once per connection
 * and keeps; the batch calls it once per cluster, in order, so each placement sees the allocations of the
 * ones before it (each query in a volatile function reads a fresh snapshot of the transaction so far).
 * A batch of N costs one round trip and one commit instead of N of each.
 *
 * The function is a temporary one (schema pg_temp), made from the statement text above on each connection
 * the first time that connection runs a batch: the text lives in this file only, so the function can never
 * disagree with the single statement, and no migration has to follow every change to it. Its name carries a
 * digest of its text, so a connection never runs an older version.
 */
function batchFunctionBody(): string {
  const branches = [
    { region: false, pinned: false },
    { region: true, pinned: false },
    { region: false, pinned: true },
    { region: true, pinned: true },
  ].map(({ region, pinned }) => {
    const test = `$7 IS ${region ? 'NOT ' : ''}NULL AND $8 IS ${pinned ? 'NOT ' : ''}NULL`;
    return `IF ${test} THEN RETURN QUERY ${placementSql({ waitForLocks: false, region, pinned })}; RETURN; END IF;`;
  });
  return `BEGIN\n${branches.join('\n')}\nEND`;
}

const BATCH_BODY = batchFunctionBody();
const BATCH_FUNCTION = `anvil_place_${createHash('sha256').update(BATCH_BODY).digest('hex').slice(0, 16)}`;

/** Creates the batch's placement function on the connection that runs it (see above). */
export const BATCH_FUNCTION_SQL = `
CREATE OR REPLACE FUNCTION pg_temp.${BATCH_FUNCTION}(text, text, int, int, int, int, text, text, timestamptz)
  RETURNS TABLE (o_waiting int, o_picked int, o_host_id text, o_gpu_indices int[], o_hourly_rate float8,
                 o_gpu_uuids text[], o_could_fit boolean)
  LANGUAGE plpgsql VOLATILE AS $anvil$ ${BATCH_BODY} $anvil$`;

/**
 * Places a batch in order. Parameters: $1 cluster ids, $2 GPU types, $3 GPU counts, $4 CPU cores, $5 memory
 * GB, $6 storage GB, $7 regions (null: any), $8 pinned hosts (null: any), all arrays of one length; $9 now.
 * One PlacementRow per cluster, with `n` its 1-based position.
 */
export const BATCH_SQL = `
SELECT x.n::int AS n, r.o_waiting AS waiting, r.o_picked AS picked, r.o_host_id AS host_id,
       r.o_gpu_indices AS gpu_indices, r.o_hourly_rate AS hourly_rate, r.o_gpu_uuids AS gpu_uuids,
       r.o_could_fit AS could_fit
  FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::int[], $6::int[], $7::text[], $8::text[])
         WITH ORDINALITY AS x(id, gpu_type, gpu_count, cpu_cores, memory_gb, storage_gb, region, host_id, n)
 CROSS JOIN LATERAL pg_temp.${BATCH_FUNCTION}(x.id, x.gpu_type, x.gpu_count, x.cpu_cores, x.memory_gb,
                                               x.storage_gb, x.region, x.host_id, $9::timestamptz) AS r
 ORDER BY x.n`;

export interface PlacementRow {
  /** 1 while the cluster is pending (0: deleted, or placed by another attempt). */
  waiting: number;
  /** 1 when a host was picked and locked. */
  picked: number;
  host_id: string | null;
  gpu_indices: number[] | null;
  hourly_rate: number | null;
  gpu_uuids: (string | null)[] | null;
  /** When not placed: true if some host, empty, could fit it (then it is busy), false if none could. */
  could_fit: boolean | null;
}

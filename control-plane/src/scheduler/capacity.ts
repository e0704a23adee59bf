import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { gpuTypeSql } from './gpu-types.ts';
import { RESERVATION_COUNTS } from './reservations.ts';

type Tx = Prisma.TransactionClient;

/**
 * The capacity the placement statement reads is materialised: host_capacity.free_indices per host and
 * GPU type, host_allocations.used_* per host. Its truth is what holds GPUs: clusters.gpu_indices and
 * the GPUs of running workloads other than clusters (endpoint workers, training). The placement and
 * release statements keep the two in step under the rows' locks; this module recomputes the
 * materialised rows from the truth (hosts joining, inventories changing, other workloads taking GPUs,
 * any drift) and is the only other writer.
 */

/**
 * CTEs computing the truth for the hosts of CTE `scope(id)`: `free(host_id, gpu_type, idx)` with the free
 * indices in ascending order, and `used(host_id, cpu, mem, disk)` held by placed clusters. A GPU whose
 * kept health is `failed` (host_gpu_health, until an operator resets it) counts as taken: it is never free.
 */
const TRUTH_CTES = `
  taken AS (
    SELECT k.host_id, t.i FROM clusters k CROSS JOIN LATERAL unnest(k.gpu_indices) AS t(i)
     WHERE k.host_id IN (SELECT id FROM scope) AND cardinality(k.gpu_indices) > 0
    UNION ALL
    SELECT w.host_id, (g->>'index')::int FROM workloads w
           CROSS JOIN LATERAL jsonb_array_elements(
             CASE WHEN jsonb_typeof(w.spec->'gpus') = 'array' THEN w.spec->'gpus' ELSE '[]'::jsonb END) AS g
     WHERE w.host_id IN (SELECT id FROM scope) AND w.kind <> 'cluster' AND w.desired = 'running'
    UNION ALL
    SELECT g.host_id, g.gpu_index FROM host_gpu_health g
     WHERE g.host_id IN (SELECT id FROM scope) AND g.state = 'failed'
  ), taken_by_host AS (
    SELECT host_id, array_agg(i) AS idx FROM taken GROUP BY host_id
  ), free AS (
    SELECT c.host_id, c.gpu_type,
           ARRAY(SELECT x FROM unnest(c.gpu_indices) AS x WHERE x <> ALL(COALESCE(t.idx, '{}')) ORDER BY x) AS idx
      FROM host_capacity c LEFT JOIN taken_by_host t ON t.host_id = c.host_id
     WHERE c.host_id IN (SELECT id FROM scope)
  ), used AS (
    SELECT s.id AS host_id, COALESCE(sum(k.cpu_cores), 0)::int AS cpu, COALESCE(sum(k.memory_gb), 0)::int AS mem,
           COALESCE(sum(k.storage_gb), 0)::int AS disk
      FROM scope s LEFT JOIN clusters k ON k.host_id = s.id AND cardinality(k.gpu_indices) > 0
     GROUP BY s.id
  )`;

/**
 * Rewrites the materialised capacity of the hosts in the JSON array `$1` from the truth. Run it only
 * while holding those hosts' rows (lockHost) or the tables (syncCapacity): its reads must come after
 * every placement and release on those hosts committed.
 */
const REFRESH_SQL = `
  WITH scope AS (SELECT DISTINCT jsonb_array_elements_text($1::jsonb) AS id), ${TRUTH_CTES},
  capacity AS (
    UPDATE host_capacity c SET free_indices = f.idx, free_count = cardinality(f.idx), updated_at = now()
      FROM free f
     WHERE c.host_id = f.host_id AND c.gpu_type = f.gpu_type AND c.free_indices IS DISTINCT FROM f.idx
    RETURNING c.host_id
  )
  INSERT INTO host_allocations (host_id, used_cpu_cores, used_memory_gb, used_storage_gb, updated_at)
  SELECT u.host_id, u.cpu, u.mem, u.disk, now() FROM used u
   WHERE EXISTS (SELECT 1 FROM host_capacity c WHERE c.host_id = u.host_id)
  ON CONFLICT (host_id) DO UPDATE SET
    used_cpu_cores = EXCLUDED.used_cpu_cores, used_memory_gb = EXCLUDED.used_memory_gb,
    used_storage_gb = EXCLUDED.used_storage_gb, updated_at = now()
  WHERE (host_allocations.used_cpu_cores, host_allocations.used_memory_gb, host_allocations.used_storage_gb)
        IS DISTINCT FROM (EXCLUDED.used_cpu_cores, EXCLUDED.used_memory_gb, EXCLUDED.used_storage_gb)`;

/** Hosts whose materialised capacity differs from the truth (read without locks: may name a host being changed). */
const DRIFTED_SQL = `
  WITH scope AS (SELECT DISTINCT host_id AS id FROM host_capacity), ${TRUTH_CTES}
  SELECT f.host_id FROM free f JOIN host_capacity c ON c.host_id = f.host_id AND c.gpu_type = f.gpu_type
   WHERE c.free_indices IS DISTINCT FROM f.idx
  UNION
  SELECT u.host_id FROM used u LEFT JOIN host_allocations a ON a.host_id = u.host_id
   WHERE a.host_id IS NULL
      OR (a.used_cpu_cores, a.used_memory_gb, a.used_storage_gb) IS DISTINCT FROM (u.cpu, u.mem, u.disk)`;

const TYPE_OF_DEVICE = gpuTypeSql(`(d->>'name')`);

/** An inventory device offered as a whole GPU: of a type customers ask for and not split into MIG instances. */
const OFFERED_DEVICE = `${TYPE_OF_DEVICE} IS NOT NULL AND NOT COALESCE((d->>'migEnabled')::boolean, false)`;

/**
 * A host whose GPUs may take work: simulated ones, or real ones whose Docker has the NVIDIA runtime
 * (without it a container asking for a GPU fails to start). HostService.gpuWork says why not to operators.
 */
const OFFERS_GPU_WORK = `(COALESCE((h.inventory->'gpus'->>'simulated')::boolean, false)
  OR COALESCE((h.inventory->'docker'->>'nvidiaRuntime')::boolean, false))`;

/** Hosts with an inventory holding a GPU customers can ask for, and no capacity rows yet (joined since the last sync). */
const UNINDEXED_HOSTS_SQL = `
  SELECT h.id AS host_id FROM hosts h
   WHERE h.deleted_at IS NULL AND h.inventory IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM host_capacity c WHERE c.host_id = h.id)
     AND EXISTS (SELECT 1 FROM jsonb_array_elements(
                   CASE WHEN jsonb_typeof(h.inventory->'gpus'->'devices') = 'array' THEN h.inventory->'gpus'->'devices'
                        ELSE '[]'::jsonb END) AS d
                  WHERE ${OFFERED_DEVICE})
     AND ${OFFERS_GPU_WORK}`;

/** Hosts whose inventory changed since their rows were written, or that are gone (deleted, no inventory). */
const CHANGED_HOSTS_SQL = `
  SELECT DISTINCT c.host_id FROM host_capacity c LEFT JOIN hosts h ON h.id = c.host_id
   WHERE h.id IS NULL OR h.deleted_at IS NOT NULL OR h.inventory IS NULL OR md5(h.inventory::text) <> c.digest
  UNION
  SELECT a.host_id FROM host_allocations a WHERE NOT EXISTS (SELECT 1 FROM host_capacity c WHERE c.host_id = a.host_id)`;

/**
 * Capacity rows of the hosts in JSON array `$1` from their inventories (rows whose digest did not change
 * stay). Everything is computed per host (LATERAL), so the work grows with the hosts, whatever the
 * planner guesses about the size of `$1`.
 */
const UPSERT_ROWS_SQL = `
  INSERT INTO host_capacity (host_id, gpu_type, gpu_indices, gpu_uuids, cpu_threads, memory_gb, disk_gb,
                             free_indices, free_count, digest, updated_at)
  SELECT h.id, g.gpu_type, g.indices, g.uuids, t.cpu_threads, t.memory_gb, t.disk_gb, '{}', 0, md5(h.inventory::text), now()
    FROM (SELECT DISTINCT jsonb_array_elements_text($1::jsonb) AS id) AS scope
    JOIN hosts h ON h.id = scope.id AND h.deleted_at IS NULL AND h.inventory IS NOT NULL AND ${OFFERS_GPU_WORK}
    CROSS JOIN LATERAL (
      SELECT COALESCE((h.inventory->'host'->'cpu'->>'threads')::int, (h.inventory->'host'->'cpu'->>'cores')::int) AS cpu_threads,
             (h.inventory->'host'->>'memoryBytes')::float8 / 1073741824 AS memory_gb,
             (SELECT max((k->>'sizeBytes')::float8) FROM jsonb_array_elements(
                CASE WHEN jsonb_typeof(h.inventory->'host'->'disks') = 'array' THEN h.inventory->'host'->'disks'
                     ELSE '[]'::jsonb END) AS k) / 1073741824 AS disk_gb
    ) AS t
    CROSS JOIN LATERAL (
      SELECT x.gpu_type, array_agg(x.idx ORDER BY x.idx) AS indices, array_agg(x.uuid ORDER BY x.idx) AS uuids
        FROM (SELECT ${TYPE_OF_DEVICE} AS gpu_type, (d->>'index')::int AS idx, d->>'uuid' AS uuid
                FROM jsonb_array_elements(
                       CASE WHEN jsonb_typeof(h.inventory->'gpus'->'devices') = 'array' THEN h.inventory->'gpus'->'devices'
                            ELSE '[]'::jsonb END) AS d
               WHERE ${OFFERED_DEVICE}) AS x
       GROUP BY x.gpu_type
    ) AS g
  ON CONFLICT (host_id, gpu_type) DO UPDATE SET
    gpu_indices = EXCLUDED.gpu_indices, gpu_uuids = EXCLUDED.gpu_uuids, cpu_threads = EXCLUDED.cpu_threads,
    memory_gb = EXCLUDED.memory_gb, disk_gb = EXCLUDED.disk_gb, digest = EXCLUDED.digest, updated_at = now()
  WHERE host_capacity.digest <> EXCLUDED.digest`;

/** Rows of the hosts in `$1` that are gone, or of GPU types their changed inventory no longer has. */
const DELETE_STALE_SQL = `
  WITH scope AS (SELECT jsonb_array_elements_text($1::jsonb) AS id),
  gone AS (
    DELETE FROM host_capacity c
     WHERE c.host_id IN (SELECT id FROM scope)
       AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = c.host_id AND h.deleted_at IS NULL
                         AND h.inventory IS NOT NULL AND md5(h.inventory::text) = c.digest)
    RETURNING c.host_id
  )
  DELETE FROM host_allocations a
   WHERE a.host_id IN (SELECT id FROM scope)
     AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = a.host_id AND h.deleted_at IS NULL AND h.inventory IS NOT NULL)`;

/**
 * Allocation rows of hosts in `$1` left without capacity rows (no GPU offered any more: the NVIDIA runtime
 * gone, every GPU in MIG mode): kept, the sync would find them changed on every pass.
 */
const DELETE_ORPHAN_ALLOCATIONS_SQL = `
  DELETE FROM host_allocations a
   WHERE a.host_id IN (SELECT jsonb_array_elements_text($1::jsonb))
     AND NOT EXISTS (SELECT 1 FROM host_capacity c WHERE c.host_id = a.host_id)`;

/** Reservations of clusters that are no longer pending (placed, deleted, stopped): they already count for nothing. */
const CLEAR_VOID_RESERVATIONS_SQL = `
  UPDATE host_allocations a
     SET reserved_by = NULL, reserved_gpu_type = NULL, reserved_gpu_count = 0, reserved_cpu_cores = 0,
         reserved_memory_gb = 0, reserved_storage_gb = 0, reserved_at = NULL, updated_at = now()
   WHERE a.reserved_by IS NOT NULL AND NOT ${RESERVATION_COUNTS}`;

/** Hosts whose materialised capacity differs from what holds GPUs now (tests and the benchmark check none does). */
export async function driftedHosts(db: Database): Promise<string[]> {
  return (await db.sql.query<{ host_id: string }>(DRIFTED_SQL)).map((r) => r.host_id).sort();
}

/** True when a host with GPUs joined since the last sync (cheap: for deciding whether a sync is worth it). */
export async function hasUnindexedHosts(db: Database): Promise<boolean> {
  const rows = await db.sql.query(`${UNINDEXED_HOSTS_SQL} LIMIT 1`);
  return rows.length > 0;
}

/**
 * Brings the materialised capacity in line with inventories and allocations. First, without locks, finds
 * the hosts that need it (joined, changed, gone, or drifted from the truth); only if there are any does it
 * lock both tables (EXCLUSIVE: in-flight placements and releases finish first, new ones wait; reads go on)
 * and rewrite those hosts' rows. Idempotent and safe on several replicas at once.
 */
export async function syncCapacity(db: Database): Promise<void> {
  const found = await db.sql.query<{ host_id: string }>(
    `(${UNINDEXED_HOSTS_SQL}) UNION (${CHANGED_HOSTS_SQL}) UNION (${DRIFTED_SQL})`,
  );
  await db.sql.query(CLEAR_VOID_RESERVATIONS_SQL);
  if (found.length === 0) return;
  const scope = JSON.stringify(found.map((r) => r.host_id));
  await db.prisma.$transaction(
    async (tx) => {
      await tx.$executeRawUnsafe('LOCK TABLE host_capacity, host_allocations IN EXCLUSIVE MODE');
      await tx.$executeRawUnsafe(UPSERT_ROWS_SQL, scope);
      await tx.$executeRawUnsafe(DELETE_STALE_SQL, scope);
      await tx.$executeRawUnsafe(DELETE_ORPHAN_ALLOCATIONS_SQL, scope);
      await tx.$executeRawUnsafe(REFRESH_SQL, scope);
    },
    { maxWait: 10_000, timeout: 60_000 },
  );
  // Many new rows (hosts joined): fresh statistics, so the placement statement walks the best-fit index
  // (LIMIT 1) rather than joining every host and sorting.
  if (found.length > 100) await db.sql.query('ANALYZE host_capacity, host_allocations, hosts');
}

/**
 * Locks one host's capacity in the order every writer uses (its host_capacity rows by GPU type, then its
 * host_allocations row), so placements, releases and repairs of one host never deadlock.
 */
export async function lockHost(tx: Tx, hostId: string): Promise<void> {
  await tx.$queryRawUnsafe(
    'SELECT 1 FROM host_capacity WHERE host_id = $1 ORDER BY gpu_type FOR UPDATE',
    hostId,
  );
  await tx.$queryRawUnsafe('SELECT 1 FROM host_allocations WHERE host_id = $1 FOR UPDATE', hostId);
}

/** Recomputes one host's materialised capacity from the truth; the caller holds lockHost in `tx`. */
export async function refreshHost(tx: Tx, hostId: string): Promise<void> {
  await tx.$executeRawUnsafe(REFRESH_SQL, JSON.stringify([hostId]));
}

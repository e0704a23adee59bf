import type { Database } from '../db/index.ts';
import { gpuTypeSql } from './gpu-types.ts';

/** GPU indices held on host `$1`: clusters' allocations and other workloads' GPUs (endpoint workers, training). */
export const TAKEN_INDICES_SQL = `
  SELECT t.i AS index FROM clusters k CROSS JOIN LATERAL unnest(k.gpu_indices) AS t(i)
   WHERE k.host_id = $1 AND cardinality(k.gpu_indices) > 0
  UNION ALL
  SELECT (g->>'index')::int FROM workloads w CROSS JOIN LATERAL jsonb_array_elements(w.spec->'gpus') AS g
   WHERE w.host_id = $1 AND w.kind <> 'cluster' AND w.desired = 'running'`;

/** free_count of every capacity row of host `$1`, recomputed from what is taken (run under the host's lock). */
export const REFRESH_FREE_SQL = `
  UPDATE host_capacity c SET free_count = cardinality(c.gpu_indices) - (
    SELECT count(*) FROM (${TAKEN_INDICES_SQL}) AS taken WHERE taken.index = ANY(c.gpu_indices))
  WHERE c.host_id = $1`;

/**
 * Rebuilds the capacity index from the hosts' inventories: a row per (host, GPU type) with its GPUs,
 * CPU threads, memory and largest disk; rows of deleted hosts and vanished types go. Rows whose
 * inventory digest did not change are left alone, then every free_count is recomputed from the
 * allocations. Idempotent and safe on several replicas at once (upserts keyed by host and type).
 */
export async function syncCapacity(db: Database): Promise<void> {
  const type = gpuTypeSql(`(d->>'name')`);
  const changed = await db.prisma.$executeRawUnsafe(`
    WITH inv AS (
      SELECT h.id AS host_id, md5(h.inventory::text) AS digest, h.inventory
        FROM hosts h WHERE h.deleted_at IS NULL AND h.inventory IS NOT NULL
    ), gpus AS (
      SELECT i.host_id, ${type} AS gpu_type, (d->>'index')::int AS idx, d->>'uuid' AS uuid
        FROM inv i CROSS JOIN LATERAL jsonb_array_elements(COALESCE(i.inventory->'gpus'->'devices', '[]'::jsonb)) AS d
    ), totals AS (
      SELECT i.host_id, i.digest,
             COALESCE((i.inventory->'host'->'cpu'->>'threads')::int, (i.inventory->'host'->'cpu'->>'cores')::int) AS cpu_threads,
             (i.inventory->'host'->>'memoryBytes')::float8 / 1073741824 AS memory_gb,
             (SELECT max((k->>'sizeBytes')::float8) FROM jsonb_array_elements(COALESCE(i.inventory->'host'->'disks', '[]'::jsonb)) AS k) / 1073741824 AS disk_gb
        FROM inv i
    )
    INSERT INTO host_capacity (host_id, gpu_type, gpu_indices, gpu_uuids, cpu_threads, memory_gb, disk_gb, free_count, digest, updated_at)
    SELECT g.host_id, g.gpu_type, array_agg(g.idx ORDER BY g.idx), array_agg(g.uuid ORDER BY g.idx),
           t.cpu_threads, t.memory_gb, t.disk_gb, count(*), t.digest, now()
      FROM gpus g JOIN totals t ON t.host_id = g.host_id
     WHERE g.gpu_type IS NOT NULL
     GROUP BY g.host_id, g.gpu_type, t.cpu_threads, t.memory_gb, t.disk_gb, t.digest
    ON CONFLICT (host_id, gpu_type) DO UPDATE SET
      gpu_indices = EXCLUDED.gpu_indices, gpu_uuids = EXCLUDED.gpu_uuids, cpu_threads = EXCLUDED.cpu_threads,
      memory_gb = EXCLUDED.memory_gb, disk_gb = EXCLUDED.disk_gb, digest = EXCLUDED.digest, updated_at = now()
    WHERE host_capacity.digest <> EXCLUDED.digest`);
  // Rows of deleted hosts, and of types a changed inventory no longer has (their digest is stale).
  await db.prisma.$executeRawUnsafe(`
    DELETE FROM host_capacity c
     WHERE NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = c.host_id AND h.deleted_at IS NULL
                         AND h.inventory IS NOT NULL AND md5(h.inventory::text) = c.digest)`);
  await db.prisma.$executeRawUnsafe(`
    UPDATE host_capacity c SET free_count = x.free
      FROM (SELECT c2.host_id, c2.gpu_type, cardinality(c2.gpu_indices) - (
              SELECT count(*) FROM (
                SELECT t.i AS index FROM clusters k CROSS JOIN LATERAL unnest(k.gpu_indices) AS t(i)
                 WHERE k.host_id = c2.host_id AND cardinality(k.gpu_indices) > 0
                UNION ALL
                SELECT (g->>'index')::int FROM workloads w CROSS JOIN LATERAL jsonb_array_elements(w.spec->'gpus') AS g
                 WHERE w.host_id = c2.host_id AND w.kind <> 'cluster' AND w.desired = 'running'
              ) AS taken WHERE taken.index = ANY(c2.gpu_indices)) AS free
              FROM host_capacity c2) AS x
     WHERE c.host_id = x.host_id AND c.gpu_type = x.gpu_type AND c.free_count <> x.free`);
  // Many new rows (hosts joined): fresh statistics, so candidate selection walks the index (LIMIT) rather
  // than joining every host and sorting.
  if (changed > 100) await db.prisma.$executeRawUnsafe('ANALYZE host_capacity');
}

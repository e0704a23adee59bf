-- Scheduler in one statement (issue 4). A placement is a single SQL statement, so what it decides from
-- must sit in the rows it locks: host_capacity.free_indices holds the free GPU indices of each host and
-- type, host_allocations the CPU, memory and disk that placed clusters hold on each host and the host's
-- reservation for a pending cluster (control-plane/src/scheduler/reservations.ts). Both are derived from
-- clusters.gpu_indices (and other workloads' GPUs), kept in step by the placement and release statements
-- under the rows' locks, and checked against that truth by the capacity sync, which repairs any drift.

ALTER TABLE "host_capacity" ADD COLUMN "free_indices" INTEGER[] NOT NULL DEFAULT '{}';

-- What is taken today, as the capacity sync computes it.
WITH taken AS (
  SELECT k.host_id, t.i FROM "clusters" k CROSS JOIN LATERAL unnest(k.gpu_indices) AS t(i)
   WHERE k.host_id IS NOT NULL AND cardinality(k.gpu_indices) > 0
  UNION ALL
  SELECT w.host_id, (g->>'index')::int FROM "workloads" w
         CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(w.spec->'gpus') = 'array' THEN w.spec->'gpus' ELSE '[]'::jsonb END) AS g
   WHERE w.kind <> 'cluster' AND w.desired = 'running'
), by_host AS (SELECT host_id, array_agg(i) AS idx FROM taken GROUP BY host_id)
UPDATE "host_capacity" c
   SET free_indices = ARRAY(
         SELECT x FROM unnest(c.gpu_indices) AS x
          WHERE x <> ALL(COALESCE((SELECT b.idx FROM by_host b WHERE b.host_id = c.host_id), '{}'))
          ORDER BY x);
UPDATE "host_capacity" SET free_count = cardinality(free_indices);

-- free_count is the best-fit ordering key (indexed); it may never disagree with the indices it counts.
ALTER TABLE "host_capacity" ADD CONSTRAINT "host_capacity_free_count_check" CHECK (free_count = cardinality(free_indices));

CREATE TABLE "host_allocations" (
    "host_id" TEXT NOT NULL,
    "used_cpu_cores" INTEGER NOT NULL DEFAULT 0,
    "used_memory_gb" INTEGER NOT NULL DEFAULT 0,
    "used_storage_gb" INTEGER NOT NULL DEFAULT 0,
    -- The pending cluster this host is reserved for, and what it asks for (copied so the placement
    -- statement checks backfill from the locked row alone). Ignored once that cluster is no longer pending.
    "reserved_by" TEXT,
    "reserved_gpu_type" TEXT,
    "reserved_gpu_count" INTEGER NOT NULL DEFAULT 0,
    "reserved_cpu_cores" INTEGER NOT NULL DEFAULT 0,
    "reserved_memory_gb" INTEGER NOT NULL DEFAULT 0,
    "reserved_storage_gb" INTEGER NOT NULL DEFAULT 0,
    "reserved_at" TIMESTAMPTZ(3),
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "host_allocations_pkey" PRIMARY KEY ("host_id")
);
-- A cluster holds at most one reservation.
CREATE UNIQUE INDEX "host_allocations_reserved_by_key" ON "host_allocations"("reserved_by");

INSERT INTO "host_allocations" (host_id, used_cpu_cores, used_memory_gb, used_storage_gb)
SELECT c.host_id,
       COALESCE((SELECT sum(k.cpu_cores) FROM "clusters" k WHERE k.host_id = c.host_id AND cardinality(k.gpu_indices) > 0), 0),
       COALESCE((SELECT sum(k.memory_gb) FROM "clusters" k WHERE k.host_id = c.host_id AND cardinality(k.gpu_indices) > 0), 0),
       COALESCE((SELECT sum(k.storage_gb) FROM "clusters" k WHERE k.host_id = c.host_id AND cardinality(k.gpu_indices) > 0), 0)
  FROM (SELECT DISTINCT host_id FROM "host_capacity") AS c;

-- When a pending cluster first found no room: from then on it is queued, and a younger request of its
-- GPU type and region asking for as many GPUs or more waits behind it (placement statement, FIFO guard).
ALTER TABLE "clusters" ADD COLUMN "queued_at" TIMESTAMPTZ(3);
CREATE INDEX "clusters_queue_idx" ON "clusters"("gpu_type", "created_at", "id")
  WHERE status = 'pending' AND queued_at IS NOT NULL AND host_id IS NULL;

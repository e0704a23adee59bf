-- Clusters core (issue 4): the scheduler's capacity index. One row per host and GPU type, derived from
-- the host's inventory (its GPUs of that type, CPU, memory, disk). `free_count` is a denormalised
-- ordering key for best-fit candidate selection; which GPUs are taken is always read from
-- clusters.gpu_indices (and other workloads' specs) under the row lock, so a stale count can only make
-- a candidate be tried and skipped, never hand out a GPU twice.
CREATE TABLE "host_capacity" (
    "host_id" TEXT NOT NULL,
    "gpu_type" TEXT NOT NULL,
    "gpu_indices" INTEGER[],
    "gpu_uuids" TEXT[],
    "cpu_threads" INTEGER,
    "memory_gb" DOUBLE PRECISION,
    "disk_gb" DOUBLE PRECISION,
    "free_count" INTEGER NOT NULL,
    "digest" TEXT NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "host_capacity_pkey" PRIMARY KEY ("host_id", "gpu_type")
);
CREATE INDEX "host_capacity_gpu_type_free_count_host_id_idx" ON "host_capacity"("gpu_type", "free_count", "host_id");
-- Allocations by host, for the usage sums taken under the lock.
CREATE INDEX "clusters_host_id_allocated_idx" ON "clusters"("host_id") WHERE cardinality("gpu_indices") > 0;

-- GPU health per host GPU (issue 17): the worst state the agent reported since the last operator reset.
-- A failed GPU is never free in the capacity index (control-plane/src/scheduler/capacity.ts).
CREATE TABLE "host_gpu_health" (
    "host_id" TEXT NOT NULL,
    "gpu_index" INTEGER NOT NULL,
    "gpu_uuid" TEXT NOT NULL,
    "state" TEXT NOT NULL,
    "reasons" JSONB NOT NULL DEFAULT '[]',
    "since" TIMESTAMPTZ(3) NOT NULL,
    "reset_at" TIMESTAMPTZ(3),
    "reset_by" TEXT,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "host_gpu_health_pkey" PRIMARY KEY ("host_id", "gpu_index"),
    CONSTRAINT "host_gpu_health_state_check" CHECK ("state" IN ('healthy', 'degraded', 'failed')),
    CONSTRAINT "host_gpu_health_host_id_fkey" FOREIGN KEY ("host_id") REFERENCES "hosts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- The board catalogue grew (H100_PCIE, A100_40GB, H200, L40S, A10), MIG-enabled GPUs and hosts without
-- the NVIDIA container runtime are no longer indexed: the next capacity sync rebuilds every host's rows.
UPDATE "host_capacity" SET "digest" = '';

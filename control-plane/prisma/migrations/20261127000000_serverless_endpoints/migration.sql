-- Serverless endpoints (roadmap step 2): an endpoint's configuration, its workers (each one the
-- endpoint_worker workload with the same id, holding GPUs on a host) and its durable job queue.
-- Control-plane replicas claim queued jobs with FOR UPDATE SKIP LOCKED (control-plane/src/endpoints/jobs.ts).

CREATE TABLE "endpoints" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "owner_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "status_reason" TEXT,
    "template_id" TEXT,
    "docker_image" TEXT NOT NULL,
    "command" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "worker_port" INTEGER NOT NULL DEFAULT 8000,
    "gpu_type" TEXT NOT NULL,
    "gpu_count" INTEGER NOT NULL,
    "worker_count" INTEGER NOT NULL,
    "max_concurrency" INTEGER NOT NULL,
    "timeout_seconds" INTEGER NOT NULL,
    "env" JSONB NOT NULL DEFAULT '{}',
    "auto_scaling" JSONB NOT NULL DEFAULT '{}',
    -- Raised by every update that changes what a worker runs; older workers are replaced one by one.
    "config_version" INTEGER NOT NULL DEFAULT 1,
    -- The worker count the supervisor converges to (workerCount, or the autoscaler's last decision).
    "target_workers" INTEGER NOT NULL DEFAULT 0,
    -- The autoscaler's memory: {lastScaleUpAt, lastScaleDownAt, belowSince}.
    "scale_state" JSONB NOT NULL DEFAULT '{}',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deleted_at" TIMESTAMPTZ(3),
    CONSTRAINT "endpoints_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "endpoints_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "endpoints_account_id_created_at_idx" ON "endpoints"("account_id", "created_at");
CREATE INDEX "endpoints_deleted_at_idx" ON "endpoints"("deleted_at");

-- One worker container. Its id is the id of its workload (kind endpoint_worker), whose spec holds the GPUs.
CREATE TABLE "endpoint_workers" (
    "id" TEXT NOT NULL,
    "endpoint_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "host_id" TEXT NOT NULL,
    "gpu_indices" INTEGER[] DEFAULT ARRAY[]::INTEGER[],
    "config_version" INTEGER NOT NULL,
    -- starting | ready | draining | stopped | failed | lost
    "status" TEXT NOT NULL DEFAULT 'starting',
    "status_reason" TEXT,
    "probe_failures" INTEGER NOT NULL DEFAULT 0,
    "last_probe_at" TIMESTAMPTZ(3),
    "last_probe_ms" INTEGER,
    "last_probe_error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "ready_at" TIMESTAMPTZ(3),
    "stopped_at" TIMESTAMPTZ(3),
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "endpoint_workers_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "endpoint_workers_endpoint_id_fkey" FOREIGN KEY ("endpoint_id") REFERENCES "endpoints"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "endpoint_workers_endpoint_id_status_idx" ON "endpoint_workers"("endpoint_id", "status");
CREATE INDEX "endpoint_workers_status_idx" ON "endpoint_workers"("status");

-- One request (RunPod's job): IN_QUEUE -> IN_PROGRESS -> COMPLETED | FAILED | TIMED_OUT, CANCELLED from either.
CREATE TABLE "endpoint_jobs" (
    "id" TEXT NOT NULL,
    "endpoint_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "user_id" TEXT,
    "key_id" TEXT,
    "status" TEXT NOT NULL DEFAULT 'IN_QUEUE',
    "input" JSONB,
    "output" JSONB,
    "error" TEXT,
    "execution_timeout_ms" INTEGER NOT NULL,
    "ttl_ms" BIGINT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "worker_id" TEXT,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "retries" INTEGER NOT NULL DEFAULT 0,
    -- While IN_PROGRESS: the replica running it keeps this in the future; past it, the job is queued again.
    "lease_until" TIMESTAMPTZ(3),
    "dispatched_by" TEXT,
    "stream_count" INTEGER NOT NULL DEFAULT 0,
    "stream_read" INTEGER NOT NULL DEFAULT 0,
    "webhook" TEXT,
    -- pending | sent | failed (null without a webhook)
    "webhook_status" TEXT,
    "webhook_attempts" INTEGER NOT NULL DEFAULT 0,
    "webhook_next_at" TIMESTAMPTZ(3),
    "webhook_error" TEXT,
    "queued_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "started_at" TIMESTAMPTZ(3),
    "completed_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "endpoint_jobs_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "endpoint_jobs_endpoint_id_fkey" FOREIGN KEY ("endpoint_id") REFERENCES "endpoints"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
-- The queue: oldest first per endpoint.
CREATE INDEX "endpoint_jobs_endpoint_id_status_queued_at_idx" ON "endpoint_jobs"("endpoint_id", "status", "queued_at", "id");
-- Statistics (metrics, health) read finished jobs by time.
CREATE INDEX "endpoint_jobs_endpoint_id_completed_at_idx" ON "endpoint_jobs"("endpoint_id", "completed_at");
CREATE INDEX "endpoint_jobs_status_lease_until_idx" ON "endpoint_jobs"("status", "lease_until");
CREATE INDEX "endpoint_jobs_webhook_status_webhook_next_at_idx" ON "endpoint_jobs"("webhook_status", "webhook_next_at");

-- Partial outputs a streaming worker sent (GET /v2/<endpoint>/stream/<job>), in order.
CREATE TABLE "endpoint_job_chunks" (
    "job_id" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "output" JSONB,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "endpoint_job_chunks_pkey" PRIMARY KEY ("job_id", "seq"),
    CONSTRAINT "endpoint_job_chunks_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "endpoint_jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- Training jobs, their trainers' reports (metrics, checkpoints) and tuning jobs (roadmap step 3).
-- A job's containers are workloads of kind training; its rows below are removed with its account.

CREATE TABLE "training_jobs" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "created_by_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "model_type" TEXT NOT NULL,
    "dataset_id" TEXT,
    "tags" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "status" TEXT NOT NULL DEFAULT 'pending',
    "status_reason" TEXT,
    "config" JSONB NOT NULL,
    "parameters" JSONB NOT NULL DEFAULT '{}',
    "metrics" JSONB NOT NULL DEFAULT '{}',
    "progress" JSONB NOT NULL DEFAULT '{}',
    "gpu_type" TEXT NOT NULL,
    "gpus_per_worker" INTEGER NOT NULL DEFAULT 1,
    "workers" INTEGER NOT NULL DEFAULT 1,
    "priority" TEXT NOT NULL DEFAULT 'normal',
    "image" TEXT NOT NULL,
    "command" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "form" TEXT NOT NULL DEFAULT 'full',
    "tune_id" TEXT,
    "trial_number" INTEGER,
    "attempt" INTEGER NOT NULL DEFAULT 0,
    "placement" JSONB NOT NULL DEFAULT '[]',
    "resume_from" TEXT,
    "stop_request" JSONB,
    "exit_code" INTEGER,
    "hourly_rate" DOUBLE PRECISION NOT NULL DEFAULT 0,
    "session_started_at" TIMESTAMPTZ(3),
    "queued_at" TIMESTAMPTZ(3),
    "log_cursor" BIGINT NOT NULL DEFAULT 0,
    "started_at" TIMESTAMPTZ(3),
    "completed_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "training_jobs_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "training_jobs_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "training_jobs_account_id_created_at_idx" ON "training_jobs"("account_id", "created_at");
-- The supervisor walks the jobs that are not finished.
CREATE INDEX "training_jobs_status_idx" ON "training_jobs"("status");
-- Deleting a dataset asks whether a job uses it.
CREATE INDEX "training_jobs_dataset_id_idx" ON "training_jobs"("dataset_id");
-- One job per trial number of a tuning job: two racing tuning steps cannot both create trial n.
CREATE UNIQUE INDEX "training_jobs_tune_id_trial_number_key" ON "training_jobs"("tune_id", "trial_number");

CREATE TABLE "training_metrics" (
    "id" BIGSERIAL NOT NULL,
    "job_id" TEXT NOT NULL,
    "step" INTEGER,
    "epoch" DOUBLE PRECISION,
    "values" JSONB NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "training_metrics_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "training_metrics_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "training_jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "training_metrics_job_id_id_idx" ON "training_metrics"("job_id", "id");

CREATE TABLE "training_checkpoints" (
    "id" TEXT NOT NULL,
    "job_id" TEXT NOT NULL,
    "path" TEXT NOT NULL,
    "epoch" DOUBLE PRECISION,
    "step" INTEGER,
    "loss" DOUBLE PRECISION,
    "size_bytes" BIGINT,
    "host_id" TEXT,
    "workload_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "training_checkpoints_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "training_checkpoints_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "training_jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "training_checkpoints_job_id_created_at_idx" ON "training_checkpoints"("job_id", "created_at");

CREATE TABLE "tuning_jobs" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "created_by_id" TEXT NOT NULL,
    "training_job_id" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "status_reason" TEXT,
    "algorithm" TEXT NOT NULL,
    "objective" TEXT NOT NULL,
    "metric" TEXT NOT NULL,
    "search_space" JSONB NOT NULL,
    "settings" JSONB NOT NULL,
    "form" TEXT NOT NULL DEFAULT 'full',
    "sampler_state" JSONB NOT NULL DEFAULT '{}',
    "stop_request" JSONB,
    "completed_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "tuning_jobs_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "tuning_jobs_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "tuning_jobs_account_id_created_at_idx" ON "tuning_jobs"("account_id", "created_at");
CREATE INDEX "tuning_jobs_status_idx" ON "tuning_jobs"("status");

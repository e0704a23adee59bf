-- Experiments and their runs. A run links a training job; what the job did (status, metrics, cost, time,
-- checkpoints) is read from the job whenever the run is shown, never copied here. No foreign key to
-- training_jobs: a run outlives its job's row (it then shows status `deleted`).

CREATE TABLE "experiments" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "created_by_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'active',
    "hypothesis" TEXT,
    "tags" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "metadata" JSONB NOT NULL DEFAULT '{}',
    "baseline" JSONB,
    "conclusion" TEXT,
    "primary_metric" TEXT NOT NULL DEFAULT 'loss',
    "cloned_from_id" TEXT,
    "completed_at" TIMESTAMPTZ(3),
    "archived_at" TIMESTAMPTZ(3),
    "archive_reason" TEXT,
    "preserve_artifacts" BOOLEAN NOT NULL DEFAULT true,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "experiments_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "experiments_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "experiments_account_id_created_at_idx" ON "experiments"("account_id", "created_at");

CREATE TABLE "experiment_runs" (
    "id" TEXT NOT NULL,
    "experiment_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "created_by_id" TEXT NOT NULL,
    "training_job_id" TEXT NOT NULL,
    -- 1, 2, ... in the order runs joined the experiment; taken under the experiment's row lock.
    "position" INTEGER NOT NULL,
    "name" TEXT NOT NULL,
    "parameters" JSONB NOT NULL DEFAULT '{}',
    "tags" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "notes" TEXT,
    "copied_from_run_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "experiment_runs_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "experiment_runs_experiment_id_fkey" FOREIGN KEY ("experiment_id") REFERENCES "experiments"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
-- A job appears once per experiment.
CREATE UNIQUE INDEX "experiment_runs_experiment_id_training_job_id_key" ON "experiment_runs"("experiment_id", "training_job_id");
CREATE UNIQUE INDEX "experiment_runs_experiment_id_position_key" ON "experiment_runs"("experiment_id", "position");
CREATE INDEX "experiment_runs_training_job_id_idx" ON "experiment_runs"("training_job_id");
-- A job is linked into one experiment only (RUN_ALREADY_EXISTS); a clone's copies of runs share the job.
-- Two concurrent links of one job into two experiments: the second insert fails here.
CREATE UNIQUE INDEX "experiment_runs_linked_job_key" ON "experiment_runs"("training_job_id") WHERE "copied_from_run_id" IS NULL;

-- Training artifacts (issue 18 point 4): files a trainer reports and its checkpoints, in the job's workspace
-- (rank 0's volume on its host), listed, measured by the agent, downloadable and deletable; deleted rows stay
-- (deleted_at) until the storage meter has billed them.
CREATE TABLE "training_artifacts" (
    "id" TEXT NOT NULL,
    "job_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "path" TEXT NOT NULL,
    "checkpoint_id" TEXT,
    "workload_id" TEXT NOT NULL,
    "host_id" TEXT,
    "size_bytes" BIGINT,
    "sha256" TEXT,
    "file_kind" TEXT,
    "measured_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deleted_at" TIMESTAMPTZ(3),
    CONSTRAINT "training_artifacts_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "training_artifacts_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "training_jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "training_artifacts_job_id_created_at_idx" ON "training_artifacts"("job_id", "created_at");
CREATE INDEX "training_artifacts_measured_at_idx" ON "training_artifacts"("measured_at");

-- Checkpoints reported before this table existed become artifacts of type checkpoint.
INSERT INTO "training_artifacts" ("id", "job_id", "account_id", "type", "name", "path", "checkpoint_id",
    "workload_id", "host_id", "created_at")
SELECT 'art_' || c."id", c."job_id", j."account_id", 'checkpoint', c."path", c."path", c."id", c."workload_id",
    c."host_id", c."created_at"
FROM "training_checkpoints" c JOIN "training_jobs" j ON j."id" = c."job_id";

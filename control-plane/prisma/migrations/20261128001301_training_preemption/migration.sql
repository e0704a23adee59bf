-- Preemption of training jobs (README: Preemption): how often a job gave its GPUs to a job of higher
-- priority, and when last.
ALTER TABLE "training_jobs" ADD COLUMN "preemptions" INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "training_jobs" ADD COLUMN "preempted_at" TIMESTAMPTZ(3);

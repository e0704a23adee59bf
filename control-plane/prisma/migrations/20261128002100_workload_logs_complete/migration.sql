-- The last container of a workload whose logs its agent has sent in full (log_batch `complete`): a
-- preempted trainer is requeued once its rank 0's last reports are stored, not after a guessed delay.
ALTER TABLE "workloads" ADD COLUMN "logs_complete_container_id" TEXT;

-- Endpoint workers bill their uptime (issue 16 point 14): the open billing session of a worker starts when
-- its container runs (billing_started_at) and closes into a gpu_compute usage record when the worker is
-- removed; hourly_rate is the whole worker's USD per hour (GPU price x GPU count), fixed at placement.
ALTER TABLE "endpoint_workers" ADD COLUMN "billing_started_at" TIMESTAMPTZ(3);
ALTER TABLE "endpoint_workers" ADD COLUMN "hourly_rate" DOUBLE PRECISION NOT NULL DEFAULT 0;
CREATE INDEX "endpoint_workers_account_id_billing_started_at_idx" ON "endpoint_workers"("account_id", "billing_started_at");

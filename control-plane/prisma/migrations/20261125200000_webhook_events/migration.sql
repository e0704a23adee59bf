-- Account webhook events as a transactional outbox: an event is written in the same transaction as the
-- change it reports, so none is lost when a process dies and none is sent for a change that rolled back.
-- control-plane/src/accounts/webhook-outbox.ts delivers them to the account webhook with retries and
-- purges old rows.
--
-- Cluster status changes are recorded by a trigger on `clusters` (every new cluster and every change of
-- its status), whichever code path or replica made them: API, scheduler statement, supervisor, stop and
-- delete operations, an operator's SQL.

CREATE TABLE "webhook_events" (
    "id" BIGSERIAL NOT NULL,
    "account_id" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "data" JSONB NOT NULL,
    "occurred_at" TIMESTAMPTZ(3) NOT NULL DEFAULT clock_timestamp(),
    -- pending | sent | skipped | failed
    "delivery" TEXT NOT NULL DEFAULT 'pending',
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "next_attempt_at" TIMESTAMPTZ(3) NOT NULL DEFAULT clock_timestamp(),
    -- A dispatcher holds the event until then; one that died mid-delivery lets it go when it passes.
    "lease_until" TIMESTAMPTZ(3),
    "delivery_id" TEXT,
    -- Why it was skipped, or how the last attempt failed.
    "detail" TEXT,
    "delivered_at" TIMESTAMPTZ(3),
    CONSTRAINT "webhook_events_pkey" PRIMARY KEY ("id")
);
-- Finished rows are read only by the purge; the dispatcher walks the pending ones by due time.
CREATE INDEX "webhook_events_due_idx" ON "webhook_events"("next_attempt_at") WHERE "delivery" = 'pending';
CREATE INDEX "webhook_events_occurred_at_idx" ON "webhook_events" USING BRIN ("occurred_at");

CREATE FUNCTION "anvil_record_cluster_status"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "webhook_events" ("account_id", "type", "data")
  VALUES (
    NEW."account_id",
    'cluster.status_changed',
    jsonb_build_object(
      'cluster_id', NEW."id",
      'cluster_name', NEW."name",
      'previous_status', CASE WHEN TG_OP = 'UPDATE' THEN OLD."status" END,
      'status', NEW."status",
      'reason', NEW."status_reason"
    )
  );
  RETURN NULL;
END;
$$;

CREATE TRIGGER "clusters_status_created" AFTER INSERT ON "clusters"
  FOR EACH ROW EXECUTE FUNCTION "anvil_record_cluster_status"();
CREATE TRIGGER "clusters_status_changed" AFTER UPDATE OF "status" ON "clusters"
  FOR EACH ROW WHEN (OLD."status" IS DISTINCT FROM NEW."status")
  EXECUTE FUNCTION "anvil_record_cluster_status"();

-- Creating and placing a cluster commits without NOTIFY (issue 21, scheduler). PostgreSQL serialises the
-- commits of all transactions that NOTIFY (one lock held through each commit's WAL flush, so no group
-- commit): measured on the 2-core development machine, 8 clients committing a one-row UPDATE did ~890
-- transactions/s, ~230/s with a pg_notify in each. Every create paid it twice (the cluster's own
-- announcement and its webhook event's). The wake-ups of migration 20261128001900 stay for what other
-- processes must act on; these do not need one:
-- - a cluster created pending or starting, and a placement (pending -> starting): the process that
--   creates or places it kicks its own cluster supervisor (ClusterService), which watches it from then on;
--   no other process's supervisor and no proxy health check (they follow running clusters) acts on it.
-- - a cluster.status_changed webhook event of an account whose webhook is not enabled: there is nothing to
--   send; the outbox marks it skipped at its next pass. Other events, and those of an account with an
--   enabled webhook, still wake the outbox at once.

DROP TRIGGER "clusters_status_notify_created" ON "clusters";
CREATE TRIGGER "clusters_status_notify_created" AFTER INSERT ON "clusters"
  FOR EACH ROW WHEN (NEW."status" NOT IN ('pending', 'starting'))
  EXECUTE FUNCTION "anvil_notify_cluster_status"();

DROP TRIGGER "clusters_status_notify_changed" ON "clusters";
CREATE TRIGGER "clusters_status_notify_changed" AFTER UPDATE OF "status" ON "clusters"
  FOR EACH ROW WHEN (OLD."status" IS DISTINCT FROM NEW."status"
                     AND NOT (OLD."status" = 'pending' AND NEW."status" = 'starting'))
  EXECUTE FUNCTION "anvil_notify_cluster_status"();

CREATE OR REPLACE FUNCTION "anvil_notify_webhook_events"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM "new_events" e
              WHERE e."type" <> 'cluster.status_changed'
                 OR EXISTS (SELECT 1 FROM "account_settings" s
                             WHERE s."account_id" = e."account_id"
                               AND s."data" #> '{notifications,webhook,enabled}' = 'true'::jsonb)) THEN
    PERFORM pg_notify('anvil_webhook_events', '');
  END IF;
  RETURN NULL;
END;
$$;

DROP TRIGGER "webhook_events_notify" ON "webhook_events";
CREATE TRIGGER "webhook_events_notify" AFTER INSERT ON "webhook_events"
  REFERENCING NEW TABLE AS "new_events"
  FOR EACH STATEMENT EXECUTE FUNCTION "anvil_notify_webhook_events"();

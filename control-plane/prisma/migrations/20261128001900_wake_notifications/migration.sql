-- Background loops wake on change instead of polling the database (issue 21: a quiet idle control
-- plane). These triggers announce the changes they wait for, whichever code path, process or replica
-- made them: LISTENers in every control-plane process (PGlite delivers them in its own process).
--
-- anvil_webhook_events: an account webhook event was recorded (accounts/webhook-outbox.ts delivers it).
-- anvil_cluster_status: a cluster was created or its status changed; the payload is its id (the proxy's
--   health checks start or stop with a running cluster, proxy/health.ts).

CREATE FUNCTION "anvil_notify_webhook_events"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('anvil_webhook_events', '');
  RETURN NULL;
END;
$$;

CREATE TRIGGER "webhook_events_notify" AFTER INSERT ON "webhook_events"
  FOR EACH STATEMENT EXECUTE FUNCTION "anvil_notify_webhook_events"();

CREATE FUNCTION "anvil_notify_cluster_status"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('anvil_cluster_status', NEW."id");
  RETURN NULL;
END;
$$;

CREATE TRIGGER "clusters_status_notify_created" AFTER INSERT ON "clusters"
  FOR EACH ROW EXECUTE FUNCTION "anvil_notify_cluster_status"();
CREATE TRIGGER "clusters_status_notify_changed" AFTER UPDATE OF "status" ON "clusters"
  FOR EACH ROW WHEN (OLD."status" IS DISTINCT FROM NEW."status")
  EXECUTE FUNCTION "anvil_notify_cluster_status"();

-- Host fleet (issue 3): the operators' account flag, join tokens, hosts, workloads, telemetry.

ALTER TABLE "accounts" ADD COLUMN "operator" BOOLEAN NOT NULL DEFAULT false;
-- The bootstrap owner's account (the first owner) is the operators' account.
UPDATE "accounts" SET "operator" = true
WHERE "id" = (SELECT "account_id" FROM "users" WHERE "role" = 'owner' ORDER BY "created_at" ASC LIMIT 1);

CREATE TABLE "host_join_tokens" (
    "id" TEXT NOT NULL,
    "description" TEXT,
    "hash" TEXT NOT NULL,
    "display_prefix" TEXT NOT NULL,
    "region" TEXT,
    "max_uses" INTEGER,
    "use_count" INTEGER NOT NULL DEFAULT 0,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_at" TIMESTAMPTZ(3),
    "last_used_at" TIMESTAMPTZ(3),
    "created_by_user_id" TEXT,
    "created_by_key_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "host_join_tokens_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "host_join_tokens_hash_key" ON "host_join_tokens"("hash");

CREATE TABLE "hosts" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "hostname" TEXT NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'registered',
    "cordoned" BOOLEAN NOT NULL DEFAULT false,
    "cordoned_at" TIMESTAMPTZ(3),
    "cordon_reason" TEXT,
    "region" TEXT,
    "credential_hash" TEXT NOT NULL,
    "agent_version" TEXT,
    "protocol_version" INTEGER,
    "inventory" JSONB,
    "simulated" BOOLEAN NOT NULL DEFAULT false,
    "gpu_count" INTEGER NOT NULL DEFAULT 0,
    "last_heartbeat_at" TIMESTAMPTZ(3),
    "unreachable_since" TIMESTAMPTZ(3),
    "connected_replica_id" TEXT,
    "connection_id" TEXT,
    "connected_at" TIMESTAMPTZ(3),
    "disconnected_at" TIMESTAMPTZ(3),
    "desired_generation" INTEGER NOT NULL DEFAULT 0,
    "acked_generation" INTEGER,
    "join_token_id" TEXT,
    "deleted_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "hosts_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "hosts_credential_hash_key" ON "hosts"("credential_hash");
CREATE INDEX "hosts_state_idx" ON "hosts"("state");
ALTER TABLE "hosts" ADD CONSTRAINT "hosts_join_token_id_fkey" FOREIGN KEY ("join_token_id") REFERENCES "host_join_tokens"("id") ON DELETE SET NULL ON UPDATE CASCADE;

CREATE TABLE "workloads" (
    "id" TEXT NOT NULL,
    "host_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "owner_account_id" TEXT NOT NULL,
    "spec" JSONB NOT NULL,
    "desired" TEXT NOT NULL DEFAULT 'running',
    "phase" TEXT NOT NULL DEFAULT 'pending',
    "actual_status" JSONB,
    "actual_at" TIMESTAMPTZ(3),
    "pull_progress" JSONB,
    "host_unreachable" BOOLEAN NOT NULL DEFAULT false,
    "generation" INTEGER NOT NULL DEFAULT 0,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "workloads_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "workloads_host_id_desired_idx" ON "workloads"("host_id", "desired");
CREATE INDEX "workloads_owner_account_id_idx" ON "workloads"("owner_account_id");
ALTER TABLE "workloads" ADD CONSTRAINT "workloads_host_id_fkey" FOREIGN KEY ("host_id") REFERENCES "hosts"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "workloads" ADD CONSTRAINT "workloads_owner_account_id_fkey" FOREIGN KEY ("owner_account_id") REFERENCES "accounts"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- Telemetry: no foreign keys, so ingestion is one plain INSERT and retention one plain DELETE.
CREATE TABLE "metric_samples" (
    "id" BIGSERIAL NOT NULL,
    "host_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "series" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "data" JSONB NOT NULL,
    "info" JSONB,
    "received_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "metric_samples_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "metric_samples_host_id_kind_series_at_idx" ON "metric_samples"("host_id", "kind", "series", "at");
CREATE INDEX "metric_samples_received_at_idx" ON "metric_samples"("received_at");

CREATE TABLE "metric_rollups" (
    "host_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "series" TEXT NOT NULL,
    "bucket" TIMESTAMPTZ(3) NOT NULL,
    "samples" INTEGER NOT NULL,
    "data" JSONB NOT NULL,
    "computed_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "metric_rollups_pkey" PRIMARY KEY ("host_id","kind","series","bucket")
);
CREATE INDEX "metric_rollups_bucket_idx" ON "metric_rollups"("bucket");
CREATE INDEX "metric_rollups_computed_at_idx" ON "metric_rollups"("computed_at");

CREATE TABLE "log_entries" (
    "seq" BIGSERIAL NOT NULL,
    "host_id" TEXT NOT NULL,
    "workload_id" TEXT NOT NULL,
    "container_id" TEXT NOT NULL,
    "stream" TEXT NOT NULL,
    "ts" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "line" TEXT NOT NULL,
    "received_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "log_entries_pkey" PRIMARY KEY ("seq")
);
CREATE INDEX "log_entries_workload_id_seq_idx" ON "log_entries"("workload_id", "seq");
CREATE INDEX "log_entries_received_at_idx" ON "log_entries"("received_at");

CREATE TABLE "log_losses" (
    "id" BIGSERIAL NOT NULL,
    "host_id" TEXT NOT NULL,
    "workload_id" TEXT,
    "container_id" TEXT,
    "lines" INTEGER NOT NULL,
    "bytes" BIGINT NOT NULL,
    "first_ts" TEXT,
    "last_ts" TEXT,
    "received_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "log_losses_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "log_losses_workload_id_received_at_idx" ON "log_losses"("workload_id", "received_at");
CREATE INDEX "log_losses_received_at_idx" ON "log_losses"("received_at");

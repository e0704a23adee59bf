-- Cluster secrets (issue 5): values stored sealed with the secret box (AES-256-GCM), never in clear.

CREATE TABLE "cluster_secrets" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "cluster_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "type" TEXT NOT NULL,
    "category" TEXT,
    "sealed_value" TEXT NOT NULL,
    "environment_variable" TEXT,
    "file_path" TEXT,
    "expiration_date" TIMESTAMPTZ(3),
    "permissions" JSONB NOT NULL,
    "rotation_policy" JSONB,
    "last_rotation" TIMESTAMPTZ(3),
    "next_rotation" TIMESTAMPTZ(3),
    "tags" TEXT[],
    "access_count" INTEGER NOT NULL DEFAULT 0,
    "last_accessed" TIMESTAMPTZ(3),
    "created_by_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "cluster_secrets_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "cluster_secrets_cluster_id_name_key" ON "cluster_secrets"("cluster_id", "name");
CREATE INDEX "cluster_secrets_account_id_idx" ON "cluster_secrets"("account_id");

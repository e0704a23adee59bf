-- Clusters (issue 4), usage records (read by the usage reports of issue 6) and the GPU price table.

CREATE TABLE "clusters" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "owner_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "status_reason" TEXT,
    "gpu_type" TEXT NOT NULL,
    "gpu_count" INTEGER NOT NULL,
    "cpu_cores" INTEGER NOT NULL,
    "memory_gb" INTEGER NOT NULL,
    "storage_gb" INTEGER NOT NULL,
    "region" TEXT,
    "project_id" TEXT,
    "template_id" TEXT,
    "docker_image" TEXT NOT NULL,
    "command" TEXT[],
    "env" JSONB NOT NULL DEFAULT '{}',
    "ports" JSONB NOT NULL DEFAULT '[]',
    "ssh_enabled" BOOLEAN NOT NULL DEFAULT false,
    "expires_at" TIMESTAMPTZ(3),
    "host_id" TEXT,
    "gpu_indices" INTEGER[],
    "hourly_rate" DOUBLE PRECISION NOT NULL DEFAULT 0,
    "session_started_at" TIMESTAMPTZ(3),
    "operation" JSONB,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "deleted_at" TIMESTAMPTZ(3),
    CONSTRAINT "clusters_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "clusters_account_id_status_idx" ON "clusters"("account_id", "status");
CREATE INDEX "clusters_host_id_idx" ON "clusters"("host_id");
CREATE INDEX "clusters_status_created_at_idx" ON "clusters"("status", "created_at");

CREATE TABLE "usage_records" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "user_id" TEXT,
    "resource_type" TEXT NOT NULL,
    "resource_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "gpu_type" TEXT,
    "gpu_count" INTEGER NOT NULL DEFAULT 0,
    "quantity" DOUBLE PRECISION NOT NULL,
    "unit" TEXT NOT NULL,
    "gpu_hours" DOUBLE PRECISION NOT NULL DEFAULT 0,
    "cost" DOUBLE PRECISION NOT NULL,
    "currency" TEXT NOT NULL DEFAULT 'USD',
    "started_at" TIMESTAMPTZ(3) NOT NULL,
    "ended_at" TIMESTAMPTZ(3) NOT NULL,
    "metadata" JSONB,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "usage_records_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "usage_records_account_id_ended_at_idx" ON "usage_records"("account_id", "ended_at");
CREATE INDEX "usage_records_resource_id_idx" ON "usage_records"("resource_id");

CREATE TABLE "gpu_prices" (
    "gpu_type" TEXT NOT NULL,
    "hourly_rate" DOUBLE PRECISION NOT NULL,
    "currency" TEXT NOT NULL DEFAULT 'USD',
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "gpu_prices_pkey" PRIMARY KEY ("gpu_type")
);

CREATE TABLE "cluster_templates" (
    "id" TEXT NOT NULL,
    "account_id" TEXT,
    "project_id" TEXT NOT NULL DEFAULT '',
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL,
    "category" TEXT NOT NULL,
    "framework" TEXT,
    "version" TEXT NOT NULL DEFAULT '1.0.0',
    "version_notes" TEXT,
    "docker_image" TEXT NOT NULL,
    "gpu_compatible" BOOLEAN NOT NULL DEFAULT true,
    "official" BOOLEAN NOT NULL DEFAULT false,
    "default_configuration" JSONB NOT NULL,
    "environment_variables" JSONB NOT NULL DEFAULT '{}',
    "startup_script" TEXT,
    "port_mappings" JSONB NOT NULL DEFAULT '[]',
    "required_packages" TEXT[],
    "software_versions" JSONB NOT NULL DEFAULT '{}',
    "resource_limits" JSONB,
    "compatibility" JSONB,
    "tags" TEXT[],
    "created_by_id" TEXT,
    "is_public" BOOLEAN NOT NULL DEFAULT false,
    "is_deprecated" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "deleted_at" TIMESTAMPTZ(3),
    CONSTRAINT "cluster_templates_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "cluster_templates_account_id_project_id_name_idx" ON "cluster_templates"("account_id", "project_id", "name");
-- Live template names are unique per account and project (official templates: account_id NULL).
CREATE UNIQUE INDEX "cluster_templates_live_name_key"
    ON "cluster_templates"(COALESCE("account_id", ''), "project_id", "name") WHERE "deleted_at" IS NULL;

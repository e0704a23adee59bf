-- Cluster custom metrics (issue 4): values a cluster reports itself through
-- POST /v1/clusters/{cluster_id}/metrics/custom. Kept as long as metric rollups (30 days by default).

CREATE TABLE "cluster_custom_metrics" (
    "id" BIGSERIAL NOT NULL,
    "cluster_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "type" TEXT NOT NULL,
    "unit" TEXT,
    "tags" TEXT[],
    "value" DOUBLE PRECISION NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "received_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "cluster_custom_metrics_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "cluster_custom_metrics_cluster_id_name_at_idx" ON "cluster_custom_metrics"("cluster_id", "name", "at");
CREATE INDEX "cluster_custom_metrics_received_at_idx" ON "cluster_custom_metrics"("received_at");

-- HTTPS port proxy across replicas (issue 5): access logs written by every control-plane process in
-- batches, so GET /proxy?include_access_logs=true shows the traffic of all of them. Retention (see
-- control-plane/src/proxy/traffic.ts): the newest 100 entries per cluster (what the API shows), none
-- older than 7 days.

CREATE TABLE "proxy_access_logs" (
    "id" BIGSERIAL NOT NULL,
    "cluster_id" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "client_ip" TEXT NOT NULL,
    "user_id" TEXT,
    "method" TEXT NOT NULL,
    "path" TEXT NOT NULL,
    "status_code" INTEGER NOT NULL,
    "response_time_ms" DOUBLE PRECISION NOT NULL,
    "user_agent" TEXT,
    CONSTRAINT "proxy_access_logs_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "proxy_access_logs_cluster_id_fkey" FOREIGN KEY ("cluster_id") REFERENCES "clusters"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
-- Reads (newest first per cluster) and the per-cluster trim walk this index.
CREATE INDEX "proxy_access_logs_cluster_id_at_idx" ON "proxy_access_logs"("cluster_id", "at" DESC);
-- The age purge.
CREATE INDEX "proxy_access_logs_at_idx" ON "proxy_access_logs" USING BRIN ("at");

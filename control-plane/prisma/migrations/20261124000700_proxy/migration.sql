-- HTTPS port proxy (issue 5): per-cluster proxy settings, port mappings with their health and usage
-- counters, the visitors seen per mapping (unique_visitors), and login tickets / cookie sessions.

CREATE TABLE "proxy_settings" (
    "cluster_id" TEXT NOT NULL,
    "enabled" BOOLEAN NOT NULL DEFAULT true,
    "default_authentication" BOOLEAN NOT NULL DEFAULT true,
    "session_timeout_minutes" INTEGER NOT NULL DEFAULT 480,
    "max_concurrent_sessions" INTEGER,
    "ip_whitelist" TEXT[] NOT NULL DEFAULT ARRAY[]::TEXT[],
    "blocked_ips" TEXT[] NOT NULL DEFAULT ARRAY[]::TEXT[],
    "global_rate_limit" JSONB,
    "per_user_rate_limit" JSONB,
    "security_headers" JSONB NOT NULL DEFAULT '{}',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "proxy_settings_pkey" PRIMARY KEY ("cluster_id"),
    CONSTRAINT "proxy_settings_cluster_id_fkey" FOREIGN KEY ("cluster_id") REFERENCES "clusters"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE TABLE "proxy_port_mappings" (
    "id" TEXT NOT NULL,
    "cluster_id" TEXT NOT NULL,
    "internal_port" INTEGER NOT NULL,
    "external_port" INTEGER NOT NULL,
    "protocol" TEXT NOT NULL DEFAULT 'tcp',
    "description" TEXT NOT NULL,
    "health_check" JSONB,
    "access_control" JSONB NOT NULL DEFAULT '{}',
    "custom_domain" TEXT,
    "health_status" TEXT,
    "consecutive_failures" INTEGER NOT NULL DEFAULT 0,
    "last_check" TIMESTAMPTZ(3),
    "total_requests" BIGINT NOT NULL DEFAULT 0,
    "total_response_ms" DOUBLE PRECISION NOT NULL DEFAULT 0,
    "last_accessed" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "proxy_port_mappings_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "proxy_port_mappings_cluster_id_fkey" FOREIGN KEY ("cluster_id") REFERENCES "clusters"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE UNIQUE INDEX "proxy_port_mappings_cluster_id_internal_port_key" ON "proxy_port_mappings"("cluster_id", "internal_port");
CREATE UNIQUE INDEX "proxy_port_mappings_cluster_id_external_port_key" ON "proxy_port_mappings"("cluster_id", "external_port");

CREATE TABLE "proxy_visitors" (
    "port_id" TEXT NOT NULL,
    "visitor" TEXT NOT NULL,
    "first_seen" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "proxy_visitors_pkey" PRIMARY KEY ("port_id", "visitor"),
    CONSTRAINT "proxy_visitors_port_id_fkey" FOREIGN KEY ("port_id") REFERENCES "proxy_port_mappings"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE TABLE "proxy_sessions" (
    "token_hash" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "cluster_id" TEXT NOT NULL,
    "internal_port" INTEGER NOT NULL,
    "user_id" TEXT NOT NULL,
    "key_id" TEXT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "proxy_sessions_pkey" PRIMARY KEY ("token_hash"),
    CONSTRAINT "proxy_sessions_cluster_id_fkey" FOREIGN KEY ("cluster_id") REFERENCES "clusters"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "proxy_sessions_cluster_id_kind_expires_at_idx" ON "proxy_sessions"("cluster_id", "kind", "expires_at");

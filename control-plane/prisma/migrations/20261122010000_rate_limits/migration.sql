-- API request log as per-minute rollups (see schema.prisma, model ApiRequest): a row counts the requests
-- of one account, key, method, route and status in the minute starting at created_at. Existing rows keep
-- their meaning: one request each (request_count 1, duration_ms its duration).

ALTER TABLE "api_requests"
    ADD COLUMN "request_count" INTEGER NOT NULL DEFAULT 1,
    ADD COLUMN "duration_max_ms" DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN "duration_buckets" INTEGER[] NOT NULL DEFAULT ARRAY[]::INTEGER[];

-- The key every process upserts its counts into. NULLS NOT DISTINCT (PostgreSQL 15+) so rows without a
-- key merge too. Existing per-request rows might collide on it: fold them first.
WITH folded AS (
    DELETE FROM "api_requests" RETURNING *
)
INSERT INTO "api_requests" ("account_id", "key_id", "method", "route", "status_code", "created_at",
                            "request_count", "duration_ms", "duration_max_ms")
SELECT "account_id", "key_id", "method", "route", "status_code", date_trunc('minute', "created_at"),
       sum("request_count"), sum("duration_ms"), max("duration_ms")
  FROM folded
 GROUP BY 1, 2, 3, 4, 5, 6;

CREATE UNIQUE INDEX "api_requests_rollup_key" ON "api_requests"
    ("account_id", "key_id", "method", "route", "status_code", "created_at") NULLS NOT DISTINCT;

-- Retention purges by time alone; BRIN suits an append-only table written in time order.
CREATE INDEX "api_requests_created_at_idx" ON "api_requests" USING BRIN ("created_at");

-- Usage alert rules and the thresholds they (and billing.cost_alerts) crossed (issue 6).

CREATE TABLE "usage_alerts" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "threshold" DOUBLE PRECISION NOT NULL,
    "period" TEXT NOT NULL,
    "enabled" BOOLEAN NOT NULL DEFAULT true,
    "created_by_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "usage_alerts_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "usage_alerts_account_id_idx" ON "usage_alerts"("account_id");

CREATE TABLE "usage_alert_triggers" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "alert_id" TEXT,
    "rule_key" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "period" TEXT NOT NULL,
    "period_start" TIMESTAMPTZ(3) NOT NULL,
    "threshold" DOUBLE PRECISION NOT NULL,
    "value" DOUBLE PRECISION NOT NULL,
    "triggered_at" TIMESTAMPTZ(3) NOT NULL,
    "notifications" JSONB NOT NULL DEFAULT '[]',
    CONSTRAINT "usage_alert_triggers_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "usage_alert_triggers_account_id_rule_key_period_start_key" ON "usage_alert_triggers"("account_id", "rule_key", "period_start");
CREATE INDEX "usage_alert_triggers_account_id_triggered_at_idx" ON "usage_alert_triggers"("account_id", "triggered_at");

-- Host credential rotation: the agent renews its credential over the channel; the one it replaces keeps
-- working until previous_credential_expires_at (the grace), then is refused.
ALTER TABLE "hosts" ADD COLUMN "credential_issued_at" TIMESTAMPTZ(3);
ALTER TABLE "hosts" ADD COLUMN "previous_credential_hash" TEXT;
ALTER TABLE "hosts" ADD COLUMN "previous_credential_expires_at" TIMESTAMPTZ(3);
CREATE UNIQUE INDEX "hosts_previous_credential_hash_key" ON "hosts"("previous_credential_hash");

-- SSH public keys of members (issue 5): the SSH relay authenticates `ssh <cluster_id>@host` against the
-- keys of the members who may reach that cluster. A fingerprint is unique per member (SSH_KEY_EXISTS).

CREATE TABLE "ssh_keys" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "user_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "key_type" TEXT NOT NULL,
    "public_key" TEXT NOT NULL,
    "fingerprint" TEXT NOT NULL,
    "bits" INTEGER,
    "comment" TEXT,
    "last_used_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "ssh_keys_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "ssh_keys_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

CREATE UNIQUE INDEX "ssh_keys_user_id_fingerprint_key" ON "ssh_keys"("user_id", "fingerprint");
CREATE INDEX "ssh_keys_account_id_fingerprint_idx" ON "ssh_keys"("account_id", "fingerprint");

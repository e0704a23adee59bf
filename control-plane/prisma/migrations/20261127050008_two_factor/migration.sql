-- Per-member TOTP enrolment (RFC 6238) for security.two_factor. The shared secret is sealed with the
-- secret box (bound to the member); backup codes are kept only as SHA-256 hashes and removed when used.
-- last_step refuses a code replayed within its 30-second window.
CREATE TABLE "two_factor_enrolments" (
    "user_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "secret" TEXT NOT NULL,
    "confirmed_at" TIMESTAMPTZ(3),
    "backup_code_hashes" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "last_step" BIGINT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "two_factor_enrolments_pkey" PRIMARY KEY ("user_id"),
    CONSTRAINT "two_factor_enrolments_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "two_factor_enrolments_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "two_factor_enrolments_account_id_idx" ON "two_factor_enrolments"("account_id");

-- Accounts (issue 6): profile and membership columns on users, e-mail unique per account instead of
-- globally, custom roles, grants, resource shares and the resource directory, invitations, the audit log,
-- member activity and account settings.

DROP INDEX "users_email_key";
ALTER TABLE "users"
    ADD COLUMN "bio" TEXT,
    ADD COLUMN "location" TEXT,
    ADD COLUMN "website" TEXT,
    ADD COLUMN "twitter" TEXT,
    ADD COLUMN "github" TEXT,
    ADD COLUMN "avatar_file" TEXT,
    ADD COLUMN "verified" BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN "preferences" JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN "department" TEXT,
    ADD COLUMN "title" TEXT,
    ADD COLUMN "custom_permissions" TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN "invited_by_id" TEXT,
    ADD COLUMN "joined_at" TIMESTAMPTZ(3),
    ADD COLUMN "last_active_at" TIMESTAMPTZ(3),
    ADD COLUMN "suspended_at" TIMESTAMPTZ(3),
    ADD COLUMN "removed_at" TIMESTAMPTZ(3);
CREATE UNIQUE INDEX "users_account_id_email_key" ON "users"("account_id", "email");

CREATE TABLE "custom_roles" (
    "account_id" TEXT NOT NULL,
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "display_name" TEXT NOT NULL,
    "description" TEXT,
    "permissions" TEXT[],
    "scopes" TEXT[],
    "limitations" JSONB NOT NULL DEFAULT '{}',
    "inherits" TEXT[],
    "assignable" BOOLEAN NOT NULL DEFAULT true,
    "created_by_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "custom_roles_pkey" PRIMARY KEY ("account_id","id")
);
ALTER TABLE "custom_roles" ADD CONSTRAINT "custom_roles_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "permission_grants" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "user_id" TEXT NOT NULL,
    "permissions" TEXT[],
    "scopes" TEXT[],
    "resources" TEXT[],
    "reason" TEXT,
    "expires_at" TIMESTAMPTZ(3),
    "status" TEXT NOT NULL DEFAULT 'active',
    "granted_by_id" TEXT NOT NULL,
    "granted_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_by_id" TEXT,
    "revoked_at" TIMESTAMPTZ(3),
    CONSTRAINT "permission_grants_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "permission_grants_account_id_user_id_idx" ON "permission_grants"("account_id", "user_id");
ALTER TABLE "permission_grants" ADD CONSTRAINT "permission_grants_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "permission_grants" ADD CONSTRAINT "permission_grants_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "resource_shares" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "resource_id" TEXT NOT NULL,
    "user_id" TEXT NOT NULL,
    "permissions" TEXT[],
    "message" TEXT,
    "expires_at" TIMESTAMPTZ(3),
    "status" TEXT NOT NULL DEFAULT 'active',
    "shared_by_id" TEXT NOT NULL,
    "shared_at" TIMESTAMPTZ(3) NOT NULL,
    "revoked_by_id" TEXT,
    "revoked_at" TIMESTAMPTZ(3),
    CONSTRAINT "resource_shares_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "resource_shares_account_id_resource_id_idx" ON "resource_shares"("account_id", "resource_id");
CREATE INDEX "resource_shares_account_id_user_id_idx" ON "resource_shares"("account_id", "user_id");
ALTER TABLE "resource_shares" ADD CONSTRAINT "resource_shares_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE "resource_shares" ADD CONSTRAINT "resource_shares_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "resources" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "owner_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deleted_at" TIMESTAMPTZ(3),
    CONSTRAINT "resources_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "resources_account_id_owner_id_idx" ON "resources"("account_id", "owner_id");
ALTER TABLE "resources" ADD CONSTRAINT "resources_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "invitations" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "email" TEXT NOT NULL,
    "role" TEXT NOT NULL,
    "permissions" TEXT[],
    "department" TEXT,
    "title" TEXT,
    "message" TEXT,
    "token_hash" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "invited_by_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "resent_at" TIMESTAMPTZ(3),
    "cancelled_at" TIMESTAMPTZ(3),
    "accepted_at" TIMESTAMPTZ(3),
    "accepted_user_id" TEXT,
    CONSTRAINT "invitations_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "invitations_token_hash_key" ON "invitations"("token_hash");
CREATE INDEX "invitations_account_id_email_idx" ON "invitations"("account_id", "email");
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "audit_events" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "action" TEXT NOT NULL,
    "actor_id" TEXT,
    "actor_name" TEXT,
    "actor_ip" TEXT,
    "target_user_id" TEXT,
    "target_name" TEXT,
    "resource_type" TEXT,
    "resource_id" TEXT,
    "resource_name" TEXT,
    "details" JSONB NOT NULL DEFAULT '{}',
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "audit_events_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "audit_events_account_id_created_at_idx" ON "audit_events"("account_id", "created_at");
ALTER TABLE "audit_events" ADD CONSTRAINT "audit_events_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "activity_events" (
    "id" BIGSERIAL NOT NULL,
    "account_id" TEXT NOT NULL,
    "user_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "resource_type" TEXT,
    "resource_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "activity_events_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "activity_events_account_id_created_at_idx" ON "activity_events"("account_id", "created_at");
CREATE INDEX "activity_events_user_id_kind_idx" ON "activity_events"("user_id", "kind");
ALTER TABLE "activity_events" ADD CONSTRAINT "activity_events_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

CREATE TABLE "account_settings" (
    "account_id" TEXT NOT NULL,
    "data" JSONB NOT NULL DEFAULT '{}',
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "updated_by_id" TEXT,
    CONSTRAINT "account_settings_pkey" PRIMARY KEY ("account_id")
);
ALTER TABLE "account_settings" ADD CONSTRAINT "account_settings_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

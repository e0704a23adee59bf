-- Agent upgrades from the control plane (issue 20): a host may be pinned to an agent version, and the
-- fleet's desired agent version is an operator setting (agent_version_settings, one row).
ALTER TABLE "hosts" ADD COLUMN "agent_version_pin" TEXT;

CREATE TABLE "agent_version_settings" (
  "id" TEXT NOT NULL,
  -- The version every unpinned host runs; NULL: manual (hosts upgrade only when pinned one by one).
  "desired_version" TEXT,
  "updated_at" TIMESTAMPTZ(3) NOT NULL,
  "updated_by_id" TEXT,
  CONSTRAINT "agent_version_settings_pkey" PRIMARY KEY ("id")
);

-- Version history of cluster templates (issue 4): one row per published version.

CREATE TABLE "cluster_template_versions" (
    "id" TEXT NOT NULL,
    "template_id" TEXT NOT NULL,
    "version" TEXT NOT NULL,
    "version_notes" TEXT,
    "snapshot" JSONB NOT NULL,
    "created_by_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "cluster_template_versions_pkey" PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "cluster_template_versions_template_id_version_key" ON "cluster_template_versions"("template_id", "version");

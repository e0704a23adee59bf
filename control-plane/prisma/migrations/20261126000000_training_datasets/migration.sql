-- Training datasets: the rows describing datasets whose bytes the control plane stores on its disk
-- (<ANVIL_DATASETS_DIR>/<dataset id>/), their completed uploads (versions) and multipart uploads in
-- progress. Deleting a dataset (or its account) removes the rows below it; the files are removed by
-- control-plane/src/datasets/storage.ts.

CREATE TABLE "datasets" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "created_by_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "type" TEXT NOT NULL,
    "format" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'uploading',
    "tags" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "validation_config" JSONB NOT NULL DEFAULT '{}',
    "validation_result" JSONB,
    "preprocessing" JSONB NOT NULL DEFAULT '{}',
    "metadata" JSONB NOT NULL DEFAULT '{}',
    "source_url" TEXT,
    "split_ratio" JSONB,
    -- SHA-256 of the upload token (the token itself is shown once, at creation).
    "upload_token_hash" TEXT NOT NULL,
    "upload_token_expires_at" TIMESTAMPTZ(3) NOT NULL,
    "current_version_id" TEXT,
    "size_bytes" BIGINT,
    "compressed_bytes" BIGINT,
    "examples" BIGINT,
    "checksum" TEXT,
    "schema" JSONB,
    "statistics" JSONB,
    "error" JSONB,
    "processed_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "datasets_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "datasets_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "datasets_account_id_created_at_idx" ON "datasets"("account_id", "created_at");
-- Start-up looks for datasets left in processing.
CREATE INDEX "datasets_status_idx" ON "datasets"("status");

CREATE TABLE "dataset_versions" (
    "id" TEXT NOT NULL,
    "dataset_id" TEXT NOT NULL,
    "size_bytes" BIGINT NOT NULL,
    "checksum" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "dataset_versions_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "dataset_versions_dataset_id_fkey" FOREIGN KEY ("dataset_id") REFERENCES "datasets"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "dataset_versions_dataset_id_created_at_idx" ON "dataset_versions"("dataset_id", "created_at");

CREATE TABLE "dataset_uploads" (
    "id" TEXT NOT NULL,
    "dataset_id" TEXT NOT NULL,
    "filename" TEXT NOT NULL,
    "declared_size" BIGINT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'active',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "completed_at" TIMESTAMPTZ(3),
    CONSTRAINT "dataset_uploads_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "dataset_uploads_dataset_id_fkey" FOREIGN KEY ("dataset_id") REFERENCES "datasets"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX "dataset_uploads_dataset_id_idx" ON "dataset_uploads"("dataset_id");
CREATE INDEX "dataset_uploads_expires_at_idx" ON "dataset_uploads"("expires_at");

CREATE TABLE "dataset_upload_parts" (
    "upload_id" TEXT NOT NULL,
    "part_number" INTEGER NOT NULL,
    "size_bytes" BIGINT NOT NULL,
    "checksum" TEXT NOT NULL,
    "uploaded_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "dataset_upload_parts_pkey" PRIMARY KEY ("upload_id", "part_number"),
    CONSTRAINT "dataset_upload_parts_upload_id_fkey" FOREIGN KEY ("upload_id") REFERENCES "dataset_uploads"("id") ON DELETE CASCADE ON UPDATE CASCADE
);

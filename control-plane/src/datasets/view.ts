import type { Dataset, DatasetVersion } from '../db/generated/client.ts';

/** Where uploads go: `<public URL>/v2/training/uploads`; the spec's {upload_url}. */
export const UPLOAD_BASE_PATH = '/v2/training/uploads';

const toNumber = (value: bigint | null) => (value === null ? null : Number(value));

export function viewVersion(row: DatasetVersion) {
  return {
    id: row.id,
    createdAt: row.createdAt.toISOString(),
    size: Number(row.sizeBytes),
    checksum: row.checksum,
    source: row.source,
  };
}

function size(row: Dataset) {
  return {
    bytes: toNumber(row.sizeBytes),
    examples: toNumber(row.examples),
    compressed: toNumber(row.compressedBytes),
  };
}

export function viewDatasetSummary(row: Dataset) {
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    format: row.format,
    status: row.status,
    description: row.description,
    tags: row.tags,
    size: size(row),
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** The dataset as the API shows it: every value from the row (itself filled from the stored bytes). */
export function viewDataset(row: Dataset, versions: DatasetVersion[], publicUrl: string) {
  const result = row.validationResult as Record<string, unknown> | null;
  return {
    ...viewDatasetSummary(row),
    validation: { ...(row.validationConfig as Record<string, unknown>), ...(result ?? {}) },
    preprocessing: row.preprocessing as Record<string, unknown>,
    metadata: row.metadata as Record<string, unknown>,
    uploadUrl: `${publicUrl}${UPLOAD_BASE_PATH}`,
    uploadTokenExpiresAt: row.uploadTokenExpiresAt.toISOString(),
    schema: row.schema as { fields: unknown[] } | null,
    statistics: row.statistics as Record<string, unknown> | null,
    checksum: row.checksum,
    currentVersionId: row.currentVersionId,
    versions: versions.map(viewVersion),
    error: row.error as Record<string, unknown> | null,
    sourceUrl: row.sourceUrl,
    splitRatio: row.splitRatio as Record<string, number> | null,
    processedAt: row.processedAt ? row.processedAt.toISOString() : null,
  };
}

export type DatasetView = ReturnType<typeof viewDataset>;

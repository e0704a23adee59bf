import type { TrainingArtifact } from '../../db/generated/client.ts';

/** An artifact as the API shows it; every figure is what the agent measured (null before it has). */
export function viewArtifact(row: TrainingArtifact) {
  return {
    id: row.id,
    jobId: row.jobId,
    type: row.type,
    name: row.name,
    path: row.path,
    checkpointId: row.checkpointId,
    sizeBytes: row.sizeBytes === null ? null : Number(row.sizeBytes),
    sha256: row.sha256,
    fileKind: row.fileKind,
    measuredAt: row.measuredAt?.toISOString() ?? null,
    downloadUrl: `/v2/training/jobs/${row.jobId}/artifacts/${row.id}/download`,
    createdAt: row.createdAt.toISOString(),
  };
}
export type ArtifactView = ReturnType<typeof viewArtifact>;

import { Type } from '@sinclair/typebox';

const Nullable = <T extends ReturnType<typeof Type.String>>(schema: T) => Type.Union([schema, Type.Null()]);

export const ArtifactParams = Type.Object({
  job_id: Type.String({ maxLength: 64 }),
  artifactId: Type.String({ maxLength: 64 }),
});

export const TrainingArtifact = Type.Object(
  {
    id: Type.String(),
    jobId: Type.String(),
    type: Type.String({ description: 'artifact (an artifact report) or checkpoint (a checkpoint report)' }),
    name: Type.String(),
    path: Type.String({ description: "Relative to the job's workspace (ANVIL_CHECKPOINT_DIR)" }),
    checkpointId: Nullable(Type.String()),
    sizeBytes: Type.Union([Type.Integer(), Type.Null()], {
      description: "Bytes on the host as its agent last measured them (a directory's files); null: not yet",
    }),
    sha256: Nullable(Type.String({ description: "A file's SHA-256 (hex) as last measured" })),
    fileKind: Nullable(Type.String({ description: 'file, directory, missing or outside, as last measured' })),
    measuredAt: Nullable(Type.String({ format: 'date-time' })),
    downloadUrl: Type.String(),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'TrainingArtifact' },
);

export const ArtifactList = Type.Object({
  jobId: Type.String(),
  artifacts: Type.Array(Type.Ref('TrainingArtifact')),
});

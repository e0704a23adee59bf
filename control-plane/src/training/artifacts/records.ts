import { newId } from '@anvil/shared';
import type { Prisma } from '../../db/generated/client.ts';

/** What a report tells of one artifact: where it lies (the rank-0 workload's volume) and what it is. */
export interface ArtifactRecord {
  jobId: string;
  accountId: string;
  type: 'artifact' | 'checkpoint';
  name: string;
  path: string;
  checkpointId: string | null;
  workloadId: string;
  hostId: string | null;
  at: Date;
}

/**
 * Stores a reported artifact in the report reader's transaction. A path reported again (a trainer that
 * rewrites `model.bin` each epoch) is one artifact: its name and time are updated and it is measured again.
 */
export async function recordArtifact(tx: Prisma.TransactionClient, record: ArtifactRecord): Promise<void> {
  const existing = await tx.trainingArtifact.findFirst({
    where: { jobId: record.jobId, path: record.path, type: record.type, deletedAt: null },
    select: { id: true },
  });
  if (existing) {
    await tx.trainingArtifact.update({
      where: { id: existing.id },
      data: {
        name: record.name,
        checkpointId: record.checkpointId,
        workloadId: record.workloadId,
        hostId: record.hostId,
        measuredAt: null,
      },
    });
    return;
  }
  await tx.trainingArtifact.create({
    data: {
      id: newId('art'),
      jobId: record.jobId,
      accountId: record.accountId,
      type: record.type,
      name: record.name,
      path: record.path,
      checkpointId: record.checkpointId,
      workloadId: record.workloadId,
      hostId: record.hostId,
      createdAt: record.at,
    },
  });
}

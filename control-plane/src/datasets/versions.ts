import { newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { StoredBytes } from './storage.ts';

export type VersionSource = 'put' | 'multipart' | 'url';

export function newVersionId(): string {
  return newId('dsv');
}

/**
 * A completed upload: its version row, and the dataset moved to `processing` on it. What the previous
 * pass found is cleared so no field mixes two versions; the pass over the new bytes fills them again.
 * Answers false when the dataset was deleted meanwhile (the caller removes the file).
 */
export async function recordVersion(
  db: Database,
  clock: Clock,
  datasetId: string,
  versionId: string,
  stored: StoredBytes,
  source: VersionSource,
): Promise<{ id: string; createdAt: Date; size: number; checksum: string } | null> {
  const now = clock.now();
  return db.prisma.$transaction(async (tx) => {
    const moved = await tx.dataset.updateMany({
      where: { id: datasetId },
      data: {
        status: 'processing',
        currentVersionId: versionId,
        sizeBytes: BigInt(stored.size),
        checksum: stored.checksum,
        compressedBytes: null,
        examples: null,
        schema: Prisma.DbNull,
        statistics: Prisma.DbNull,
        validationResult: Prisma.DbNull,
        error: Prisma.DbNull,
        processedAt: null,
        updatedAt: now,
      },
    });
    if (moved.count === 0) return null;
    await tx.datasetVersion.create({
      data: {
        id: versionId,
        datasetId,
        sizeBytes: BigInt(stored.size),
        checksum: stored.checksum,
        source,
        createdAt: now,
      },
    });
    return { id: versionId, createdAt: now, size: stored.size, checksum: stored.checksum };
  });
}

import { ApiError } from '@anvil/shared';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import {
  isSnapshotImage,
  requireOwnImage,
  SNAPSHOT_PREFIX,
  snapshotRepository,
} from '../images/snapshot-images.ts';

const FIELD = 'from_snapshot';

function invalid(reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `${FIELD} ${reason}`, { field: FIELD, reason });
}

/**
 * Where a cluster started from a snapshot must run: the snapshot is an image on the host of the cluster it
 * was taken from (which may since have been deleted), so the new cluster is placed on that host only. The
 * name must be one of this account's snapshots, and the host must hold it now (asked of its agent).
 */
export async function snapshotSource(
  d: { db: Database; fleet: Pick<Fleet, 'agents'> },
  accountId: string,
  name: string,
): Promise<{ image: string; hostId: string }> {
  if (!isSnapshotImage(name) || !name.includes(':')) {
    throw invalid(`must be a snapshot name (${SNAPSHOT_PREFIX}<account id>/<cluster id>:<tag>)`);
  }
  requireOwnImage(accountId, name, FIELD);
  const [repository = '', tag = ''] = name.toLowerCase().split(':');
  const clusterId = repository.split('/')[2] ?? '';
  const source = await d.db.prisma.cluster.findFirst({
    where: { id: { equals: clusterId, mode: 'insensitive' }, accountId },
    select: { id: true, hostId: true, accountId: true },
  });
  const notFound = () =>
    new ApiError('SNAPSHOT_NOT_FOUND', `no snapshot ${name} in this account`, {
      field: FIELD,
      snapshot_name: name,
      suggestion: "list a cluster's snapshots with GET /v1/clusters/{id}/snapshots",
    });
  if (!source?.hostId || repository !== snapshotRepository(source.accountId, source.id)) throw notFound();
  const answer = (await d.fleet.agents.sendCommand(source.hostId, {
    name: 'list_snapshots',
    workloadId: source.id,
    repository,
  })) as { images: { tags: string[] }[] };
  if (!answer.images.some((image) => image.tags.includes(`${repository}:${tag}`))) throw notFound();
  return { image: `${repository}:${tag}`, hostId: source.hostId };
}

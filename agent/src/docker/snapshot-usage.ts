import type { SnapshotImageUsage } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { LABELS } from './labels.ts';

/** Where every snapshot repository lives (control-plane/src/images/snapshot-images.ts names them). */
const SNAPSHOT_PREFIX = 'anvil-snapshots/';

/**
 * The snapshot images among the engine's images, each with the bytes it adds to its parent. `docker
 * commit` records the container's image as the parent, so a snapshot's own bytes are its size less its
 * parent's: the base image is shared with every other container of it and is not the snapshot's to bill.
 */
export function snapshotUsageOf(images: Dockerode.ImageInfo[]): SnapshotImageUsage[] {
  const sizeOf = new Map(images.map((image) => [image.Id, image.Size]));
  return images.flatMap((image) => {
    const tag = (image.RepoTags ?? []).find((t) => t.startsWith(SNAPSHOT_PREFIX));
    if (!tag) return [];
    const size = typeof image.Size === 'number' && image.Size >= 0 ? image.Size : null;
    const parentSize = image.ParentId ? sizeOf.get(image.ParentId) : undefined;
    const ownBytes =
      size === null
        ? null
        : !image.ParentId
          ? size
          : typeof parentSize === 'number'
            ? Math.max(0, size - parentSize)
            : null;
    return [
      {
        imageId: image.Id,
        repository: tag.slice(0, tag.lastIndexOf(':')),
        workloadId: image.Labels?.[LABELS.workload] ?? null,
        sizeBytes: size,
        ownBytes,
      },
    ];
  });
}

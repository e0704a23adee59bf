import { ApiError } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { Cluster } from '../db/generated/client.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import { snapshotRepository } from '../images/snapshot-images.ts';
import type { ClusterAccess } from './access.ts';
import { sizeGb } from './results.ts';

/** One snapshot of a cluster, as the API shows it (spec: name, id and estimated size; the rest is ours). */
export interface SnapshotView {
  /** The image id (sha256:…), as stop's snapshot_creation.snapshot_id gives it. */
  id: string;
  /** `anvil-snapshots/<account id>/<cluster id>:<tag>`: a docker_image (or from_snapshot) for a new cluster. */
  name: string;
  names: string[];
  size_bytes: number | null;
  estimated_size_gb: number | null;
  created_at: string;
  host_id: string;
}

interface AgentSnapshot {
  imageId: string;
  tags: string[];
  sizeBytes: number | null;
  createdAt: string;
}

/**
 * Cluster snapshots as objects: they are the images on the cluster's host, so the list is asked of its
 * agent (nothing is copied into the database that could drift from what the host holds), and a delete
 * has the agent untag and remove the image (never forced: one a container still runs from stays, 409).
 * A host that is not connected answers 409 HOST_NOT_CONNECTED.
 */
export class ClusterSnapshots {
  constructor(private readonly d: { access: ClusterAccess; fleet: Pick<Fleet, 'agents'> }) {}

  async list(actor: Actor, clusterId: string): Promise<SnapshotView[]> {
    const cluster = await this.d.access.require(actor, clusterId, 'read');
    return this.#list(cluster);
  }

  async remove(actor: Actor, clusterId: string, snapshotId: string): Promise<SnapshotView> {
    const cluster = await this.d.access.require(actor, clusterId, 'write');
    const snapshot = (await this.#list(cluster)).find((s) => s.id === snapshotId);
    if (!snapshot || !cluster.hostId) {
      throw new ApiError('SNAPSHOT_NOT_FOUND', `cluster ${cluster.id} has no snapshot ${snapshotId}`, {
        cluster_id: cluster.id,
        snapshot_id: snapshotId,
        suggestion: `list the cluster's snapshots with GET /v1/clusters/${cluster.id}/snapshots`,
      });
    }
    const answer = (await this.d.fleet.agents.sendCommand(cluster.hostId, {
      name: 'remove_snapshots',
      workloadId: cluster.id,
      repository: snapshotRepository(cluster.accountId, cluster.id),
      keep: [],
      only: [snapshotId],
    })) as { failed?: { error: string }[] };
    const failure = answer.failed?.[0];
    if (failure) {
      throw new ApiError('CONFLICT', `snapshot ${snapshotId} could not be deleted: ${failure.error}`, {
        snapshot_id: snapshotId,
        reason: failure.error,
      });
    }
    return snapshot;
  }

  async #list(cluster: Cluster): Promise<SnapshotView[]> {
    // A cluster never placed has no host, and so no snapshot.
    if (!cluster.hostId) return [];
    const hostId = cluster.hostId;
    const answer = (await this.d.fleet.agents.sendCommand(hostId, {
      name: 'list_snapshots',
      workloadId: cluster.id,
      repository: snapshotRepository(cluster.accountId, cluster.id),
    })) as { images: AgentSnapshot[] };
    return answer.images
      .map((image) => ({
        id: image.imageId,
        name: [...image.tags].sort()[0] ?? image.imageId,
        names: [...image.tags].sort(),
        size_bytes: image.sizeBytes,
        estimated_size_gb: sizeGb(image.sizeBytes),
        created_at: image.createdAt,
        host_id: hostId,
      }))
      .sort((a, b) =>
        a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : a.id < b.id ? -1 : 1,
      );
  }
}

import type { DeleteOptions } from './operation-options.ts';

/**
 * Cluster snapshots are images on the cluster's host, made by `docker commit` of its container (stop with
 * save_state, delete with create_final_snapshot). They are found again by name: every snapshot of a
 * cluster is tagged in one repository of its account (images/snapshot-images.ts), and carries the
 * container's `anvil.workload` and `anvil.account` labels.
 */
export { snapshotRepository } from '../images/snapshot-images.ts';

/** A Docker tag from the requested snapshot name, or `<kind>-<UTC stamp of the operation start>`. */
export function snapshotTag(name: string | null, kind: string, startedAt: string): string {
  const fallback = `${kind}-${startedAt.replace(/[-:.TZ]/g, '').slice(0, 14)}`;
  return (
    (name ?? fallback)
      .replace(/[^A-Za-z0-9_.-]/g, '-')
      .replace(/^[.-]+/, '')
      .slice(0, 128) || fallback
  );
}

/**
 * Whether a delete removes the cluster's earlier snapshots. The spec's two flags say the same thing from
 * both sides and default to keeping them (preserve_snapshots true, delete_snapshots false): asking for
 * either side of the change — delete_snapshots true, or preserve_snapshots false — removes them. So
 * `delete_snapshots: true` wins over the default `preserve_snapshots: true` it is always sent with.
 */
export function removesSnapshots(options: Pick<DeleteOptions, 'delete_snapshots' | 'preserve_snapshots'>) {
  return options.delete_snapshots || !options.preserve_snapshots;
}

export interface SnapshotImageRecord {
  image_id: string;
  names: string[];
}

/** What the delete's cleaning_storage phase did with the cluster's earlier snapshots. */
export interface SnapshotCleanup {
  requested: boolean;
  /** false until the phase ran; true once the agent answered or the step was given up (see error). */
  done: boolean;
  removed: SnapshotImageRecord[];
  failed: (SnapshotImageRecord & { error: string })[];
  /** The final snapshot this delete made: never removed by it. */
  kept: SnapshotImageRecord[];
  /** Why nothing could be removed (host unreachable, the agent failed), or null. */
  error: string | null;
}

export function snapshotCleanupOf(options: DeleteOptions): SnapshotCleanup {
  return {
    requested: removesSnapshots(options),
    done: false,
    removed: [],
    failed: [],
    kept: [],
    error: null,
  };
}

interface AgentImage {
  imageId: string;
  tags: string[];
}

/** The agent's remove_snapshots answer, in the operation's terms. */
export function recordRemoval(
  cleanup: SnapshotCleanup,
  answer: { removed?: AgentImage[]; failed?: (AgentImage & { error: string })[]; kept?: AgentImage[] },
): void {
  const record = (i: AgentImage) => ({ image_id: i.imageId, names: i.tags });
  cleanup.removed = (answer.removed ?? []).map(record);
  cleanup.failed = (answer.failed ?? []).map((i) => ({ ...record(i), error: i.error }));
  cleanup.kept = (answer.kept ?? []).map(record);
  cleanup.done = true;
}

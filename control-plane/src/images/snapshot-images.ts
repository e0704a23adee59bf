import { ApiError } from '@anvil/shared';

/**
 * Snapshot images are named per account: `anvil-snapshots/<account id>/<cluster id>:<tag>`. The agent
 * never pulls them, and runs one only for the account its repository and its `anvil.account` label
 * name; the control plane refuses a create naming another account's snapshot before it gets that far.
 */
export const SNAPSHOT_PREFIX = 'anvil-snapshots/';

export function isSnapshotImage(image: string): boolean {
  return image.toLowerCase().startsWith(SNAPSHOT_PREFIX);
}

/** The repository every snapshot of the cluster is tagged in. */
export function snapshotRepository(accountId: string, clusterId: string): string {
  return `${SNAPSHOT_PREFIX}${accountId.toLowerCase()}/${clusterId.toLowerCase()}`;
}

/** The account a snapshot image belongs to (from its name), or null for any other image. */
export function snapshotAccountOf(image: string): string | null {
  if (!isSnapshotImage(image)) return null;
  const account = image.slice(SNAPSHOT_PREFIX.length).split('/')[0] ?? '';
  return account.toLowerCase();
}

/**
 * Refuses (403 FORBIDDEN, naming the field) a docker image that is another account's snapshot, or a name
 * under the snapshot prefix that no snapshot of this account can have.
 */
export function requireOwnImage(accountId: string, image: string, field = 'docker_image'): void {
  const owner = snapshotAccountOf(image);
  if (owner === null || owner === accountId.toLowerCase()) return;
  throw new ApiError(
    'FORBIDDEN',
    `${field} ${image} is a snapshot of another account; only its own account may use it`,
    {
      field,
      reason: 'snapshot images are usable only by the account that made them',
    },
  );
}

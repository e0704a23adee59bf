import type { WorkloadSpec } from '@anvil/shared/protocol';
import { normaliseImageRef } from '../docker/pull.ts';

/** Every snapshot image lives under this repository prefix: `anvil-snapshots/<account id>/<cluster id>:<tag>`. */
export const SNAPSHOT_PREFIX = 'anvil-snapshots/';

/** The image label naming the account a snapshot was committed from (the container's own label). */
export const ACCOUNT_LABEL = 'anvil.account';

/**
 * Where a workload's image may come from, which decides whether an account may run it:
 * - registry: pulled before every create with the account's own credentials, so a copy another account
 *   pulled (or the operator left) on the host proves nothing;
 * - host: an image the operator pre-loaded and listed in the agent's `hostImages` option: every account
 *   may run it, and it is never pulled (the operator vouches for it);
 * - snapshot: an image this host committed from a cluster; only its own account may run it.
 */
export type ImageSource = { kind: 'registry' } | { kind: 'host' } | { kind: 'snapshot'; accountId: string };

/**
 * `hostImages` entries are image references (`anvil-test/busybox:latest`; `busybox` means
 * `busybox:latest`) or prefixes ending in `*` (`anvil-test/*`). A snapshot image is never a host image,
 * whatever the list says.
 */
export function imageSource(image: string, hostImages: readonly string[]): ImageSource {
  const ref = normaliseImageRef(image);
  if (ref.startsWith(SNAPSHOT_PREFIX)) {
    const accountId = ref.slice(SNAPSHOT_PREFIX.length).split('/')[0] ?? '';
    return { kind: 'snapshot', accountId };
  }
  const listed = hostImages.some((entry) =>
    entry.endsWith('*') ? ref.startsWith(entry.slice(0, -1)) : normaliseImageRef(entry) === ref,
  );
  return listed ? { kind: 'host' } : { kind: 'registry' };
}

/** The account a workload runs for, as the control plane named it (its `anvil.account` label). */
export function specAccount(spec: WorkloadSpec): string | null {
  const declared = (spec as { accountId?: unknown }).accountId;
  if (typeof declared === 'string' && declared !== '') return declared;
  return spec.labels[ACCOUNT_LABEL] ?? null;
}

/**
 * Why a workload may not run a snapshot image, or null when it may: the image's repository and its
 * `anvil.account` label (set when the container was committed) must both name the workload's account.
 */
export function snapshotRefusal(
  image: string,
  source: { accountId: string },
  imageLabels: Record<string, string> | null,
  account: string | null,
): string | null {
  if (imageLabels === null) return `snapshot image ${image} is not on this host`;
  const owner = imageLabels[ACCOUNT_LABEL] ?? null;
  if (account === null || owner !== account || source.accountId !== account.toLowerCase()) {
    return `snapshot image ${image} belongs to another account; a workload may only run its own account's snapshots`;
  }
  return null;
}

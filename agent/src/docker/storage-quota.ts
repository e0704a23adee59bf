import { readFile } from 'node:fs/promises';
import type Dockerode from 'dockerode';
import { errorMessage } from '../errors.ts';

export interface StorageQuota {
  /** Whether `--storage-opt size` bounds a container's writable layer on this engine. */
  enforced: boolean;
  reason: string | null;
}

interface Mount {
  mountPoint: string;
  fsType: string;
  options: string[];
}

/** /proc/mounts escapes spaces and the like as octal (\040). */
function unescapeOctal(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

export function parseMounts(text: string): Mount[] {
  return text
    .split('\n')
    .map((line) => line.split(' '))
    .filter((fields) => fields.length >= 4)
    .map(([, mountPoint, fsType, options]) => ({
      mountPoint: unescapeOctal(mountPoint ?? ''),
      fsType: fsType ?? '',
      options: (options ?? '').split(','),
    }));
}

/** The mount holding `path`: the longest mount point that is a prefix of it (the last one mounted wins). */
export function mountOf(mounts: Mount[], path: string): Mount | null {
  let best: Mount | null = null;
  for (const mount of mounts) {
    const prefix = mount.mountPoint.endsWith('/') ? mount.mountPoint : `${mount.mountPoint}/`;
    if (path !== mount.mountPoint && !path.startsWith(prefix)) continue;
    if (!best || mount.mountPoint.length >= best.mountPoint.length) best = mount;
  }
  return best;
}

/**
 * Docker bounds the writable layer (`--storage-opt size`) with overlay2 only on xfs mounted with project
 * quotas (pquota/prjquota); devicemapper, btrfs and zfs have their own means, not used here. Decided from
 * `docker info` and the mount under Docker's root directory, never by trying.
 */
export function storageQuotaOf(
  info: { Driver?: string; DockerRootDir?: string; DriverStatus?: [string, string][] },
  mounts: Mount[],
): StorageQuota {
  const driver = info.Driver ?? 'unknown';
  if (driver !== 'overlay2') {
    return {
      enforced: false,
      reason: `storage driver ${driver}: Anvil bounds disk only on overlay2 over xfs`,
    };
  }
  const backing = info.DriverStatus?.find(([key]) => key === 'Backing Filesystem')?.[1] ?? 'unknown';
  if (backing !== 'xfs') {
    return {
      enforced: false,
      reason: `overlay2 on ${backing}: the writable layer can only be bounded on xfs mounted with pquota`,
    };
  }
  const mount = mountOf(mounts, info.DockerRootDir ?? '/var/lib/docker');
  const quota = mount?.options.some((o) => o === 'prjquota' || o === 'pquota') ?? false;
  if (!quota) {
    return {
      enforced: false,
      reason: `xfs at ${mount?.mountPoint ?? '?'} is mounted without pquota: the writable layer cannot be bounded`,
    };
  }
  return { enforced: true, reason: null };
}

export async function detectStorageQuota(docker: Dockerode): Promise<StorageQuota> {
  try {
    const [info, mounts] = await Promise.all([docker.info(), readFile('/proc/mounts', 'utf8')]);
    return storageQuotaOf(info, parseMounts(mounts));
  } catch (err) {
    return { enforced: false, reason: `could not tell: ${errorMessage(err)}` };
  }
}

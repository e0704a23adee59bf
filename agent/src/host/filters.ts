/** Container plumbing, not the host's own hardware: per-container traffic comes from docker stats. */
export function isHostInterface(name: string): boolean {
  return !name.startsWith('veth');
}

const PSEUDO_FS = new Set(['overlay', 'tmpfs', 'devtmpfs', 'squashfs', 'nsfs', 'shm', 'aufs']);

/** Real filesystems only: Docker's overlay mounts would list every container once more. */
export function isHostDisk(fsType: string | null, mount: string): boolean {
  if (fsType && PSEUDO_FS.has(fsType)) return false;
  return (
    !mount.startsWith('/var/lib/docker/') && !mount.startsWith('/run/docker/') && !mount.startsWith('/snap/')
  );
}

/** systeminformation reports "unknown" as '', -1 or null depending on the field; all become null. */
export function known<T>(value: T | null | undefined | ''): T | null {
  if (value === undefined || value === null || value === '') return null;
  if (typeof value === 'number' && (!Number.isFinite(value) || value < 0)) return null;
  return value;
}

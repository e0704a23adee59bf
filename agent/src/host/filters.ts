/** Container plumbing, not the host's own hardware: per-container traffic comes from docker stats. */
export function isHostInterface(name: string): boolean {
  return !name.startsWith('veth');
}

/**
 * Filesystems that hold no host storage: memory-backed, kernel interfaces, container layers. Kernel
 * interfaces are named too (not only left to their zero size) because stat'ing an autofs mount point
 * would mount it.
 */
const PSEUDO_FS = new Set([
  'overlay',
  'tmpfs',
  'devtmpfs',
  'squashfs',
  'nsfs',
  'shm',
  'aufs',
  'ramfs',
  'proc',
  'sysfs',
  'cgroup',
  'cgroup2',
  'devpts',
  'mqueue',
  'debugfs',
  'tracefs',
  'securityfs',
  'pstore',
  'bpf',
  'autofs',
  'fusectl',
  'configfs',
  'hugetlbfs',
  'binfmt_misc',
  'efivarfs',
  'rpc_pipefs',
  'selinuxfs',
  'nfsd',
]);

const REMOTE_FS = new Set([
  'nfs',
  'nfs4',
  'cifs',
  'smb3',
  'smbfs',
  'ceph',
  'glusterfs',
  '9p',
  'afs',
  'lustre',
]);

/**
 * Network filesystems, which `df -l` leaves out: they are another machine's disks, and stat'ing a hung
 * NFS mount would block a thread of the agent's pool.
 */
export function isRemoteFs(fsType: string, source: string): boolean {
  return (
    REMOTE_FS.has(fsType) ||
    fsType.startsWith('fuse.sshfs') ||
    source.startsWith('//') ||
    /^[^/][^:]*:/.test(source)
  );
}

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

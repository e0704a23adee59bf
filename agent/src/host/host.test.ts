import { createHook } from 'node:async_hooks';
import { mkdir, mkdtemp, rm, statfs, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { HostInventory, HostMetrics } from '@anvil/shared/protocol';
import { Value } from '@sinclair/typebox/value';
import si from 'systeminformation';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cpuTicksAdvanced } from '../../../test/agent/cpu-ticks.ts';
import { isHostDisk, isHostInterface, isRemoteFs, known } from './filters.ts';
import { hostInventory } from './inventory.ts';
import { createLinuxHostSampler } from './metrics.ts';
import { portableHostMetrics } from './metrics-portable.ts';

const linux = process.platform === 'linux';

/** Child processes started while `work` runs (every spawn, exec and execFile makes a PROCESSWRAP). */
async function childProcessesDuring(work: () => Promise<unknown>): Promise<number> {
  let spawned = 0;
  const hook = createHook({
    init(_id, type) {
      if (type === 'PROCESSWRAP') spawned += 1;
    },
  }).enable();
  try {
    await work();
  } finally {
    hook.disable();
  }
  return spawned;
}

describe('host inventory (systeminformation)', () => {
  it('describes this machine in the protocol shape', async () => {
    const inventory = await hostInventory();
    expect(Value.Check(HostInventory, inventory)).toBe(true);
    expect(inventory.cpu.threads).toBeGreaterThan(0);
    expect(inventory.memoryBytes).toBeGreaterThan(0);
    expect(inventory.disks.some((d) => d.mount === '/')).toBe(true);
    expect(inventory.networkInterfaces.some((n) => n.name === 'lo')).toBe(true);
  });

  it('reads the operating system and CPU once, memory, disks and interfaces every time', async () => {
    const osInfo = vi.spyOn(si, 'osInfo');
    const cpu = vi.spyOn(si, 'cpu');
    const mem = vi.spyOn(si, 'mem');
    try {
      const [first, second] = [await hostInventory(), await hostInventory()];
      expect(second.os).toEqual(first.os);
      expect(second.cpu).toEqual(first.cpu);
      // At most once: the test above may have read them already.
      expect(osInfo.mock.calls.length).toBeLessThanOrEqual(1);
      expect(cpu.mock.calls.length).toBeLessThanOrEqual(1);
      expect(mem).toHaveBeenCalledTimes(2);
    } finally {
      vi.restoreAllMocks();
    }
  });
});

describe.skipIf(!linux)('host metrics from /proc and /sys, on this machine', () => {
  it('samples cpu, load, memory, disks, disk io and network without starting a process', async () => {
    const sample = createLinuxHostSampler();
    const first = await sample();
    expect(Value.Check(HostMetrics, first)).toBe(true);
    // CPU percent is over the time between two samples: the first has none.
    expect(first.cpuPercent).toBeNull();
    await cpuTicksAdvanced();
    let second: HostMetrics | null = null;
    // systeminformation started df, lsblk, cat and more for each sample.
    expect(
      await childProcessesDuring(async () => {
        second = await sample();
      }),
    ).toBe(0);
    expect(Value.Check(HostMetrics, second)).toBe(true);
    const s = second!;
    expect(s.cpuPercent).toBeGreaterThanOrEqual(0);
    expect(s.cpuPercent).toBeLessThanOrEqual(100);
    expect(s.memoryUsedBytes).toBeGreaterThan(0);
    expect(s.memoryTotalBytes).toBe(s.memoryUsedBytes! + s.memoryAvailableBytes!);
    expect(s.load1).toBeGreaterThanOrEqual(0);
    expect(s.network.find((n) => n.interface === 'lo')?.rxBytes).toBeGreaterThanOrEqual(0);
    expect(s.network.some((n) => n.interface.startsWith('veth'))).toBe(false);
    // The root filesystem once, with what statfs says of it (as `df`).
    const roots = s.disks.filter((d) => d.mount === '/');
    expect(roots).toHaveLength(1);
    const root = await statfs('/');
    expect(roots[0]!.sizeBytes).toBe(root.blocks * root.bsize);
    expect(s.disks.some((d) => d.mount.startsWith('/var/lib/docker/') || d.mount.startsWith('/proc'))).toBe(
      false,
    );
  });
});

describe('host metrics from recorded kernel files', () => {
  let root: string;
  const proc = () => join(root, 'proc');
  const put = async (path: string, text: string) => {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, path), text);
  };
  const statfsCalls: string[] = [];
  const fakeStatfs = async (path: string) => {
    statfsCalls.push(path);
    if (path === '/') return { blocks: 1000, bfree: 400, bavail: 300, bsize: 4096 };
    if (path === '/data') return { blocks: 50, bfree: 50, bavail: 50, bsize: 1024 };
    if (path === '/weird') return { blocks: 0, bfree: 0, bavail: 0, bsize: 4096 };
    throw new Error(`unexpected statfs ${path}`);
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'anvil-host-proc-'));
    await put('proc/stat', 'cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 100 0 100 700 100 0 0 0 0 0\n');
    await put('proc/meminfo', 'MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    600 kB\n');
    await put(
      'proc/net/dev',
      `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0
  eth0: 500 5 1 2 0 0 0 0 700 7 3 4 0 0 0 0
veth1a2b3c: 99 9 0 0 0 0 0 0 99 9 0 0 0 0 0 0
`,
    );
    await put(
      'proc/diskstats',
      [
        '   7       0 loop0 50 0 400 0 60 0 800 0 0 0 0 0 0 0 0 0 0',
        ' 259       0 nvme0n1 10 0 20 0 30 0 40 0 0 0 0 0 0 0 0 0 0',
        ' 259       1 nvme0n1p1 9 0 18 0 29 0 38 0 0 0 0 0 0 0 0 0 0',
        ' 253       0 dm-0 9 0 18 0 29 0 38 0 0 0 0 0 0 0 0 0 0',
        '  11       0 sr0 5 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0',
        ' 254       0 vda 1 0 2 0 3 0 4 0 0 0 0 0 0 0 0 0 0',
        '',
      ].join('\n'),
    );
    await put(
      'proc/self/mountinfo',
      [
        '21 26 0:20 / /proc rw,relatime - proc proc rw',
        '26 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p1 rw',
        '41 26 259:1 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw',
        '42 26 259:1 / /srv/again rw,relatime - ext4 /dev/nvme0n1p1 rw',
        '50 26 0:50 / /var/lib/docker/overlay2/abc/merged rw - overlay overlay rw',
        '51 26 0:51 / /mnt/nfs rw - nfs4 fileserver:/export rw',
        '52 26 254:0 / /data rw - xfs /dev/vda rw',
        '53 26 0:53 / /weird rw - somefs none rw',
        '54 26 0:54 / /proc/sys/fs/binfmt_misc rw - autofs systemd-1 rw',
        '',
      ].join('\n'),
    );
    const sysBlock = join(root, 'sys', 'block');
    await mkdir(sysBlock, { recursive: true });
    await symlink('../devices/virtual/block/loop0', join(sysBlock, 'loop0'));
    await symlink('../devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1', join(sysBlock, 'nvme0n1'));
    await symlink('../devices/virtual/block/dm-0', join(sysBlock, 'dm-0'));
    await symlink(
      '../devices/pci0000:00/0000:00:01.1/ata1/host0/target0:0:0/0:0:0:0/block/sr0',
      join(sysBlock, 'sr0'),
    );
    await symlink('../devices/pci0000:00/0000:00:05.0/virtio2/block/vda', join(sysBlock, 'vda'));
  });

  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('maps the files to the protocol, whole disks only, one entry per filesystem', async () => {
    const sample = createLinuxHostSampler({
      procRoot: proc(),
      sysRoot: join(root, 'sys'),
      statfs: fakeStatfs,
    });
    const first = await sample();
    expect(first).toMatchObject({
      cpuPercent: null,
      memoryTotalBytes: 1000 * 1024,
      memoryUsedBytes: 400 * 1024,
      memoryAvailableBytes: 600 * 1024,
      // nvme0n1 and vda: not the partition (counted in its disk), loop, device mapper nor the CD drive.
      diskIo: { readOps: 11, writeOps: 33, readBytes: 22 * 512, writeBytes: 44 * 512 },
      disks: [
        { mount: '/', sizeBytes: 1000 * 4096, usedBytes: 600 * 4096, availableBytes: 300 * 4096 },
        { mount: '/data', sizeBytes: 50 * 1024, usedBytes: 0, availableBytes: 50 * 1024 },
      ],
      network: [
        { interface: 'lo', rxBytes: 10, txBytes: 10, rxErrors: 0, txErrors: 0, rxDropped: 0, txDropped: 0 },
        {
          interface: 'eth0',
          rxBytes: 500,
          txBytes: 700,
          rxErrors: 1,
          txErrors: 3,
          rxDropped: 2,
          txDropped: 4,
        },
      ],
    });
    expect(Value.Check(HostMetrics, first)).toBe(true);
    // Neither the NFS share (another machine's disk) nor kernel interfaces such as autofs were stat'ed.
    expect(statfsCalls.sort()).toEqual(['/', '/data', '/weird']);

    // 400 more ticks, 100 of them idle: 75 % busy.
    await put('proc/stat', 'cpu  300 0 200 750 150 0 0 0 0 0\ncpu0 300 0 200 750 150 0 0 0 0 0\n');
    expect((await sample()).cpuPercent).toBe(75);
  });

  it('leaves a part null or empty when its file cannot be read', async () => {
    const sample = createLinuxHostSampler({
      procRoot: join(root, 'missing'),
      sysRoot: join(root, 'sys'),
      statfs: fakeStatfs,
    });
    const metrics = await sample();
    expect(metrics).toMatchObject({
      cpuPercent: null,
      memoryTotalBytes: null,
      memoryUsedBytes: null,
      disks: [],
      diskIo: null,
      network: [],
    });
    expect(Value.Check(HostMetrics, metrics)).toBe(true);
  });
});

describe('portable host metrics (systeminformation, for platforms without /proc)', () => {
  it('samples in the protocol shape', async () => {
    const sample = await portableHostMetrics();
    expect(Value.Check(HostMetrics, sample)).toBe(true);
    expect(sample.memoryUsedBytes).toBeGreaterThan(0);
  });
});

describe('host filters', () => {
  it('leaves out container plumbing, network filesystems and maps unknowns to null', () => {
    expect(isHostInterface('veth12ab')).toBe(false);
    expect(isHostInterface('eth0')).toBe(true);
    expect(isHostDisk('overlay', '/var/lib/docker/overlay2/x/merged')).toBe(false);
    expect(isHostDisk('ext4', '/')).toBe(true);
    expect(isHostDisk('autofs', '/proc/sys/fs/binfmt_misc')).toBe(false);
    expect(isRemoteFs('nfs4', 'fileserver:/export')).toBe(true);
    expect(isRemoteFs('cifs', '//server/share')).toBe(true);
    expect(isRemoteFs('fuse.sshfs', 'me@host:/home')).toBe(true);
    expect(isRemoteFs('ext4', '/dev/nvme0n1p1')).toBe(false);
    expect(isRemoteFs('zfs', 'tank/data')).toBe(false);
    expect(known(-1)).toBeNull();
    expect(known('')).toBeNull();
    expect(known(0)).toBe(0);
  });
});

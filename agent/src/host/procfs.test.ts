import { describe, expect, it } from 'vitest';
import { parseDiskstats, parseMeminfo, parseMountinfo, parseNetDev, parseProcStat } from './procfs.ts';

// Recorded on a 2-CPU Debian 12 VM running Docker 20.10, trimmed; the vda1 partition and the /mnt mount
// with a space in its path are added to cover those cases.

const PROC_STAT = `cpu  1508254 0 668759 500017 6156 0 12964 0 0 0
cpu0 752160 0 325580 263528 906 0 6040 0 0 0
cpu1 756094 0 343179 236489 5249 0 6924 0 0 0
intr 15291958 0 0 0 0 0 0
ctxt 98765432
btime 1763626512
processes 412345
procs_running 2
procs_blocked 0
softirq 1234 0 1 2 3 4 5 6 7 8
`;

const MEMINFO = `MemTotal:       24683620 kB
MemFree:        21972940 kB
MemAvailable:   23329024 kB
Buffers:           33792 kB
Cached:          1551540 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`;

const NET_DEV = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 4355688910 4324003    0    0    0     0          0         0 4355688910 4324003    0    0    0     0       0          0
  eth0: 756315434   24451    3    5    0     0          0         0  1814091   14693    7   11    0     0       0          0
docker0: 1223877604  105332    0    0    0     0          0         0 121365106  104715    0   14    0     0       0          0
`;

const DISKSTATS = `   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 142580 16692 5033178 123479 878140 294192 28535400 280043 0 201536 546968 227837 256 9670984 79010 231616 64435
 254       1 vda1 142000 16000 5000000 123000 878000 294000 28500000 280000 0 201000 546000 227000 256 9670000 79000 231000 64000
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
`;

const MOUNTINFO = `21 26 0:20 / /proc rw,relatime - proc proc rw
26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 26 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw,discard,resv_strict
90 26 254:1 / /mnt/my\\040data rw,relatime shared:2 master:1 - xfs /dev/vdb1 rw,attr2
`;

describe('/proc parsers', () => {
  it('reads the aggregate CPU line and counts online CPUs', () => {
    expect(parseProcStat(PROC_STAT)).toEqual({
      // user nice system idle iowait irq softirq steal
      totalTicks: 1508254 + 668759 + 500017 + 6156 + 12964,
      idleTicks: 500017 + 6156,
      // Docker's system_cpu_usage adds the first seven fields (no steal).
      dockerSystemTicks: 1508254 + 668759 + 500017 + 6156 + 12964,
      onlineCpus: 2,
    });
    expect(parseProcStat('intr 1 2 3\n')).toBeNull();
  });

  it('reads meminfo in bytes, with and without a unit', () => {
    const mem = parseMeminfo(MEMINFO);
    expect(mem.get('MemTotal')).toBe(24683620 * 1024);
    expect(mem.get('MemAvailable')).toBe(23329024 * 1024);
    expect(mem.get('HugePages_Total')).toBe(0);
  });

  it('reads per-interface counters from net/dev', () => {
    const net = parseNetDev(NET_DEV);
    expect(net.map((n) => n.interface)).toEqual(['lo', 'eth0', 'docker0']);
    expect(net[1]).toEqual({
      interface: 'eth0',
      rxBytes: 756315434,
      rxErrors: 3,
      rxDropped: 5,
      txBytes: 1814091,
      txErrors: 7,
      txDropped: 11,
    });
  });

  it('reads operations and sectors from diskstats', () => {
    const disks = parseDiskstats(DISKSTATS);
    expect(disks.map((d) => d.name)).toEqual(['loop0', 'vda', 'vda1', 'zram0']);
    expect(disks[1]).toEqual({
      name: 'vda',
      readOps: 142580,
      readSectors: 5033178,
      writeOps: 878140,
      writeSectors: 28535400,
    });
  });

  it('reads mountinfo with optional fields and escaped paths', () => {
    const mounts = parseMountinfo(MOUNTINFO);
    expect(mounts).toHaveLength(6);
    expect(mounts[1]).toMatchObject({ device: '254:0', root: '/', mountPoint: '/', fsType: 'ext4' });
    expect(mounts[2]).toMatchObject({ fsType: 'cgroup', superOptions: ['rw', 'cpuacct'] });
    expect(mounts[4]).toMatchObject({
      root: '/var/lib/docker',
      mountPoint: '/var/lib/docker',
      source: '/dev/vda',
    });
    expect(mounts[5]).toMatchObject({ mountPoint: '/mnt/my data', fsType: 'xfs', source: '/dev/vdb1' });
  });
});

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseMountinfo } from '../host/procfs.ts';
import {
  cgroupMounts,
  locateCgroupDirs,
  parseBlkioBytes,
  parseIoStat,
  parseProcCgroup,
  readCgroupCounters,
} from './cgroup.ts';

const ID = '3faa60b662eb5e62f4d6484b6810a51b5ac53fd0dbdd41249a8445d1fccc9972';

// A Docker 20.10 host with the hybrid layout (cgroupfs driver), recorded.
const HYBRID_MOUNTS = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 30 0:34 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`;
const HYBRID_PROC_CGROUP = `9:name=systemd:/docker/${ID}
7:blkio:/docker/${ID}
4:memory:/docker/${ID}
2:cpuacct:/docker/${ID}
1:cpu:/docker/${ID}
0::/docker/${ID}
`;

// A unified (v2 only) host with the systemd driver, as Debian 12 and Ubuntu 22.04 set Docker up.
const V2_MOUNTS = `25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n`;
const V2_PROC_CGROUP = `0::/system.slice/docker-${ID}.scope\n`;

describe('cgroup layout', () => {
  it('uses the v1 controllers of a hybrid host', () => {
    const dirs = locateCgroupDirs(
      parseProcCgroup(HYBRID_PROC_CGROUP),
      cgroupMounts(parseMountinfo(HYBRID_MOUNTS)),
    );
    expect(dirs).toEqual({
      cpu: { version: 1, path: `/sys/fs/cgroup/cpuacct/docker/${ID}` },
      memory: { version: 1, path: `/sys/fs/cgroup/memory/docker/${ID}` },
      io: { version: 1, path: `/sys/fs/cgroup/blkio/docker/${ID}` },
    });
  });

  it('uses the unified tree of a v2 host', () => {
    const dirs = locateCgroupDirs(parseProcCgroup(V2_PROC_CGROUP), cgroupMounts(parseMountinfo(V2_MOUNTS)));
    const path = `/sys/fs/cgroup/system.slice/docker-${ID}.scope`;
    expect(dirs).toEqual({
      cpu: { version: 2, path },
      memory: { version: 2, path },
      io: { version: 2, path },
    });
  });

  it('sees nothing of a cgroup outside the mounted subtree (an agent inside a cgroup namespace)', () => {
    const mounts = cgroupMounts(
      parseMountinfo('25 1 0:22 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n'),
    );
    const dirs = locateCgroupDirs(parseProcCgroup(V2_PROC_CGROUP), mounts);
    expect(dirs).toEqual({ cpu: null, memory: null, io: null });
  });
});

describe('cgroup counters', () => {
  const files =
    (contents: Record<string, string>) =>
    (path: string): string | null =>
      contents[path] ?? null;

  it('reads v1 files, where no limit is the largest page-aligned value', () => {
    const dir = (c: string) => `/cg/${c}`;
    const counters = readCgroupCounters(
      {
        cpu: { version: 1, path: dir('cpuacct') },
        memory: { version: 1, path: dir('memory') },
        io: { version: 1, path: dir('blkio') },
      },
      files({
        [join(dir('cpuacct'), 'cpuacct.usage')]: '92197792\n',
        [join(dir('memory'), 'memory.usage_in_bytes')]: '6074368\n',
        [join(dir('memory'), 'memory.limit_in_bytes')]: '9223372036854771712\n',
        [join(dir('memory'), 'memory.stat')]:
          'cache 5242880\nrss 49152\ninactive_file 5242880\ntotal_cache 5242880\ntotal_inactive_file 5242880\n',
        // Kernels without the CFQ scheduler have only the throttle layer's file.
        [join(dir('blkio'), 'blkio.throttle.io_service_bytes_recursive')]:
          '8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 12288\n8:0 Discard 0\n8:0 Total 12288\n8:16 Read 4\nTotal 12292\n',
      }),
    );
    expect(counters).toEqual({
      cpuTotalNs: 92197792,
      memoryUsageBytes: 6074368,
      memoryLimitBytes: null,
      memoryInactiveFileBytes: 5242880,
      blockReadBytes: 4100,
      blockWriteBytes: 8192,
    });
  });

  it('reads v2 files (cpu.stat in microseconds, "max" for no limit)', () => {
    const path = '/cg/docker-x.scope';
    const v2 = { version: 2 as const, path };
    const read = files({
      [join(path, 'cpu.stat')]: 'usage_usec 92197\nuser_usec 44094\nsystem_usec 48103\nnice_usec 0\n',
      [join(path, 'memory.current')]: '6074368\n',
      [join(path, 'memory.max')]: 'max\n',
      [join(path, 'memory.stat')]: 'anon 45056\nfile 5242880\nactive_file 0\ninactive_file 5242880\n',
      [join(path, 'io.stat')]:
        '8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n8:16 rbytes=4 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n',
    });
    expect(readCgroupCounters({ cpu: v2, memory: v2, io: v2 }, read)).toEqual({
      cpuTotalNs: 92197000,
      memoryUsageBytes: 6074368,
      memoryLimitBytes: null,
      memoryInactiveFileBytes: 5242880,
      blockReadBytes: 4100,
      blockWriteBytes: 8192,
    });

    const limited = files({
      [join(path, 'cpu.stat')]: 'usage_usec 1\n',
      [join(path, 'memory.current')]: '10\n',
      [join(path, 'memory.max')]: '536870912\n',
      [join(path, 'memory.stat')]: 'anon 10\n',
      [join(path, 'io.stat')]: '',
    });
    expect(readCgroupCounters({ cpu: v2, memory: v2, io: v2 }, limited)).toMatchObject({
      memoryLimitBytes: 536870912,
      memoryInactiveFileBytes: null,
      blockReadBytes: 0,
    });
  });

  it('fails, rather than guessing, when a file is missing or not a counter', () => {
    const v2 = { version: 2 as const, path: '/cg' };
    expect(() => readCgroupCounters({ cpu: v2, memory: v2, io: v2 }, files({}))).toThrow(
      'cannot read /cg/cpu.stat',
    );
    expect(() => readCgroupCounters({ cpu: null, memory: v2, io: v2 }, files({}))).toThrow(/not visible/);
    const garbage = files({
      '/cg/cpu.stat': 'usage_usec 1\n',
      '/cg/memory.current': 'lots\n',
      '/cg/memory.max': 'max\n',
      '/cg/memory.stat': '',
      '/cg/io.stat': '',
    });
    expect(() => readCgroupCounters({ cpu: v2, memory: v2, io: v2 }, garbage)).toThrow(/not a counter/);
  });

  it('sums block IO over devices', () => {
    expect(parseIoStat('8:0 rbytes=1 wbytes=2\n8:1 rbytes=10 wbytes=20 rios=3\n')).toEqual({
      read: 11,
      write: 22,
    });
    expect(parseBlkioBytes('Total 0\n')).toEqual({ read: 0, write: 0 });
  });
});

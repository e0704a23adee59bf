import { join, relative } from 'node:path';
import type { MountInfo } from '../host/procfs.ts';

/**
 * A container's resource counters read from its cgroup files, the files Docker's own stats endpoint
 * reads: cgroup v2 (unified), v1, or the hybrid layout (v1 controllers beside a v2 tree without them),
 * which is what `/proc/<pid>/cgroup` and the mount table say.
 */

interface CgroupMount {
  mountPoint: string;
  /** The cgroup mounted there ('/' unless the mount shows a subtree, as inside a cgroup namespace). */
  root: string;
}

export interface CgroupMounts {
  v2: CgroupMount | null;
  /** v1 controller name (cpuacct, memory, blkio...) -> its hierarchy's mount. */
  v1: Map<string, CgroupMount>;
}

export function cgroupMounts(mounts: MountInfo[]): CgroupMounts {
  const result: CgroupMounts = { v2: null, v1: new Map() };
  for (const m of mounts) {
    if (m.fsType === 'cgroup2') result.v2 ??= { mountPoint: m.mountPoint, root: m.root };
    else if (m.fsType === 'cgroup') {
      for (const option of m.superOptions)
        if (!result.v1.has(option)) result.v1.set(option, { mountPoint: m.mountPoint, root: m.root });
    }
  }
  return result;
}

export interface ProcCgroupLine {
  hierarchy: string;
  controllers: string[];
  path: string;
}

/** /proc/<pid>/cgroup: `hierarchy-id:controller,list:path`, one line per hierarchy (`0::path` for v2). */
export function parseProcCgroup(text: string): ProcCgroupLine[] {
  const lines: ProcCgroupLine[] = [];
  for (const line of text.split('\n')) {
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    const controllers = line.slice(first + 1, second);
    lines.push({
      hierarchy: line.slice(0, first),
      controllers: controllers === '' ? [] : controllers.split(','),
      path: line.slice(second + 1),
    });
  }
  return lines;
}

export interface CgroupDir {
  version: 1 | 2;
  path: string;
}

/** Where each resource's files are for one process; null where its cgroup is not visible from here. */
export interface CgroupDirs {
  cpu: CgroupDir | null;
  memory: CgroupDir | null;
  io: CgroupDir | null;
}

function under(mount: CgroupMount, path: string): string | null {
  const rel = relative(mount.root, path);
  if (rel.startsWith('..')) return null;
  return join(mount.mountPoint, rel);
}

/** A v1 controller's hierarchy wins where it is mounted (hybrid hosts keep memory and blkio there). */
export function locateCgroupDirs(lines: ProcCgroupLine[], mounts: CgroupMounts): CgroupDirs {
  const unified = lines.find((l) => l.hierarchy === '0' && l.controllers.length === 0);
  const v2 = unified && mounts.v2 ? under(mounts.v2, unified.path) : null;
  const locate = (v1Controller: string): CgroupDir | null => {
    const line = lines.find((l) => l.controllers.includes(v1Controller));
    const mount = mounts.v1.get(v1Controller);
    if (line && mount) {
      const path = under(mount, line.path);
      return path ? { version: 1, path } : null;
    }
    return v2 ? { version: 2, path: v2 } : null;
  };
  return { cpu: locate('cpuacct'), memory: locate('memory'), io: locate('blkio') };
}

export interface CgroupCounters {
  cpuTotalNs: number;
  memoryUsageBytes: number;
  /** null: no limit set. */
  memoryLimitBytes: number | null;
  memoryInactiveFileBytes: number | null;
  blockReadBytes: number;
  blockWriteBytes: number;
}

/** v1 reports "no limit" as the largest page-aligned 63-bit value; anything this large is no limit. */
const V1_NO_LIMIT = 2 ** 62;

function integer(text: string, what: string): number {
  const value = Number(text.trim());
  if (!Number.isFinite(value) || value < 0) throw new Error(`${what}: not a counter: ${text.slice(0, 40)}`);
  return value;
}

/** `key value` lines (cpu.stat, memory.stat). */
function keyed(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [key, value] = line.split(' ');
    if (key && value !== undefined) values.set(key, Number(value));
  }
  return values;
}

/** v2 io.stat: `8:0 rbytes=1 wbytes=2 rios=3 ...` per device. */
export function parseIoStat(text: string): { read: number; write: number } {
  let read = 0;
  let write = 0;
  for (const line of text.split('\n')) {
    for (const field of line.split(' ').slice(1)) {
      const [key, value] = field.split('=');
      if (key === 'rbytes') read += Number(value) || 0;
      else if (key === 'wbytes') write += Number(value) || 0;
    }
  }
  return { read, write };
}

/** v1 blkio `8:0 Read 4096` lines (plus Write, Sync, Async, Discard, Total and a closing `Total N`). */
export function parseBlkioBytes(text: string): { read: number; write: number } {
  let read = 0;
  let write = 0;
  for (const line of text.split('\n')) {
    const [device, op, value] = line.split(' ');
    if (!device || value === undefined) continue;
    if (op === 'Read') read += Number(value) || 0;
    else if (op === 'Write') write += Number(value) || 0;
  }
  return { read, write };
}

/**
 * Reads the counters Docker's stats endpoint reports (cpu total, memory usage, limit and inactive file
 * cache, block IO bytes). `read` gives a file's text or null; a file that cannot be read throws, and the
 * caller asks Docker instead.
 */
export function readCgroupCounters(dirs: CgroupDirs, read: (path: string) => string | null): CgroupCounters {
  const { cpu, memory, io } = dirs;
  if (!cpu || !memory || !io) throw new Error('cgroup not visible from this mount namespace');
  const file = (dir: CgroupDir, name: string) => {
    const text = read(join(dir.path, name));
    if (text === null) throw new Error(`cannot read ${join(dir.path, name)}`);
    return text;
  };
  const cpuText = file(cpu, cpu.version === 1 ? 'cpuacct.usage' : 'cpu.stat');
  const usageText = file(memory, memory.version === 1 ? 'memory.usage_in_bytes' : 'memory.current');
  const limitText = file(memory, memory.version === 1 ? 'memory.limit_in_bytes' : 'memory.max');
  const memStatText = file(memory, 'memory.stat');
  const ioText =
    io.version === 2
      ? file(io, 'io.stat')
      : // Docker reads the CFQ scheduler's file where the kernel has it, else the throttle layer's.
        (read(join(io.path, 'blkio.io_service_bytes_recursive')) ??
        file(io, 'blkio.throttle.io_service_bytes_recursive'));

  let cpuTotalNs: number;
  if (cpu.version === 1) cpuTotalNs = integer(cpuText, 'cpuacct.usage');
  else {
    const usec = keyed(cpuText).get('usage_usec');
    if (usec === undefined || !Number.isFinite(usec)) throw new Error('cpu.stat: no usage_usec');
    cpuTotalNs = usec * 1000;
  }

  let memoryLimitBytes: number | null;
  if (limitText.trim() === 'max') memoryLimitBytes = null;
  else {
    memoryLimitBytes = integer(limitText, 'memory limit');
    if (memory.version === 1 && memoryLimitBytes >= V1_NO_LIMIT) memoryLimitBytes = null;
  }
  const memStat = keyed(memStatText);
  // v1's hierarchical total (what Docker's CLI subtracts) where present; v2's counters are hierarchical.
  const inactive = memStat.get('total_inactive_file') ?? memStat.get('inactive_file');

  const block = io.version === 2 ? parseIoStat(ioText) : parseBlkioBytes(ioText);
  return {
    cpuTotalNs,
    memoryUsageBytes: integer(usageText, 'memory usage'),
    memoryLimitBytes,
    memoryInactiveFileBytes: inactive !== undefined && Number.isFinite(inactive) ? inactive : null,
    blockReadBytes: block.read,
    blockWriteBytes: block.write,
  };
}

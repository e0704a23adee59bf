import { readFileSync } from 'node:fs';

/**
 * Parsers for the Linux kernel's text files under /proc: pure functions over the file's text, so they
 * are tested on recorded real content. readKernelFile reads them.
 */

/** The kernel's USER_HZ: /proc/stat counts in these ticks on every Linux architecture Docker runs on. */
export const USER_HZ = 100;

export interface ProcStat {
  /** All CPUs together, in ticks: every state (user, nice, system, idle, iowait, irq, softirq, steal). */
  totalTicks: number;
  /** Idle and waiting for IO. */
  idleTicks: number;
  /** user..softirq, the sum Docker calls the system CPU usage (`system_cpu_usage`), in ticks. */
  dockerSystemTicks: number;
  /** Number of `cpuN` lines: the online CPUs. */
  onlineCpus: number;
}

/** /proc/stat: the aggregate `cpu` line and the count of online CPUs; null without a `cpu` line. */
export function parseProcStat(text: string): ProcStat | null {
  let aggregate: number[] | null = null;
  let onlineCpus = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('cpu')) continue;
    const [name, ...rest] = line.trim().split(/\s+/);
    if (name === 'cpu') aggregate = rest.map(Number);
    else if (name && /^cpu\d+$/.test(name)) onlineCpus += 1;
  }
  if (!aggregate || aggregate.length < 4 || aggregate.some((v) => !Number.isFinite(v))) return null;
  // Fields: user nice system idle iowait irq softirq steal guest guest_nice. guest and guest_nice are
  // already inside user and nice, so they are not added again.
  const field = (i: number) => aggregate![i] ?? 0;
  let totalTicks = 0;
  for (let i = 0; i < 8; i++) totalTicks += field(i);
  let dockerSystemTicks = 0;
  for (let i = 0; i < 7; i++) dockerSystemTicks += field(i);
  return { totalTicks, idleTicks: field(3) + field(4), dockerSystemTicks, onlineCpus };
}

/** /proc/meminfo: every `Key: value [kB]` line, in bytes. */
export function parseMeminfo(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /^([^:\s]+):\s+(\d+)(\s+kB)?\s*$/.exec(line);
    if (match?.[1] && match[2]) values.set(match[1], Number(match[2]) * (match[3] ? 1024 : 1));
  }
  return values;
}

export interface NetDevCounters {
  interface: string;
  rxBytes: number;
  rxErrors: number;
  rxDropped: number;
  txBytes: number;
  txErrors: number;
  txDropped: number;
}

/** /proc/net/dev (also /proc/<pid>/net/dev, the counters of that process's network namespace). */
export function parseNetDev(text: string): NetDevCounters[] {
  const result: NetDevCounters[] = [];
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    if (colon < 0 || line.includes('|')) continue;
    const name = line.slice(0, colon).trim();
    const f = line
      .slice(colon + 1)
      .trim()
      .split(/\s+/)
      .map(Number);
    // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit: bytes packets errs drop ...
    if (!name || f.length < 16 || f.some((v) => !Number.isFinite(v))) continue;
    result.push({
      interface: name,
      rxBytes: f[0]!,
      rxErrors: f[2]!,
      rxDropped: f[3]!,
      txBytes: f[8]!,
      txErrors: f[10]!,
      txDropped: f[11]!,
    });
  }
  return result;
}

export interface DiskCounters {
  name: string;
  readOps: number;
  readSectors: number;
  writeOps: number;
  writeSectors: number;
}

/** /proc/diskstats. Sectors are 512 bytes there whatever the device's own sector size. */
export function parseDiskstats(text: string): DiskCounters[] {
  const result: DiskCounters[] = [];
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || !f[2]) continue;
    const n = (i: number) => Number(f[i]);
    if (![3, 5, 7, 9].every((i) => Number.isFinite(n(i)))) continue;
    result.push({ name: f[2], readOps: n(3), readSectors: n(5), writeOps: n(7), writeSectors: n(9) });
  }
  return result;
}

export interface MountInfo {
  /** major:minor of the device holding the filesystem. */
  device: string;
  /** The directory of the filesystem that is mounted here ('/' unless a bind mount of a subdirectory). */
  root: string;
  mountPoint: string;
  fsType: string;
  source: string;
  superOptions: string[];
}

/** The kernel writes space, tab, newline and backslash in paths as octal escapes (\040 ...). */
function unescapeOctal(value: string): string {
  return value.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

/** /proc/<pid>/mountinfo: `id parent major:minor root mountpoint options [optional...] - fstype source super`. */
export function parseMountinfo(text: string): MountInfo[] {
  const result: MountInfo[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-', 6);
    if (f.length < 10 || dash < 0 || !f[2] || !f[3] || !f[4]) continue;
    result.push({
      device: f[2],
      root: unescapeOctal(f[3]),
      mountPoint: unescapeOctal(f[4]),
      fsType: f[dash + 1] ?? '',
      source: unescapeOctal(f[dash + 2] ?? ''),
      superOptions: (f[dash + 3] ?? '').split(','),
    });
  }
  return result;
}

/**
 * The text of a file the kernel generates (procfs, sysfs, cgroupfs), or null when it cannot be read.
 * Synchronous on purpose: these files are made in memory when read, never wait on a disk, and a sampling
 * round reads dozens of them; the promise API's open/stat/read/close trips through the thread pool cost
 * about ten times the CPU of the reads themselves.
 */
export function readKernelFile(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

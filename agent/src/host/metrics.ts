import { readlinkSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import type { HostMetrics } from '@anvil/shared/protocol';
import { isHostDisk, isHostInterface, isRemoteFs } from './filters.ts';
import {
  type MountInfo,
  type ProcStat,
  parseDiskstats,
  parseMeminfo,
  parseMountinfo,
  parseNetDev,
  parseProcStat,
  readKernelFile,
} from './procfs.ts';

export interface LinuxHostSamplerOptions {
  /** Where procfs is mounted (tests point it at recorded files). */
  procRoot?: string;
  /** Where sysfs is mounted. */
  sysRoot?: string;
  /** Filesystem usage of a mount point; tests stand in their own. */
  statfs?: (path: string) => Promise<{ blocks: number; bfree: number; bavail: number; bsize: number }>;
}

/**
 * Host metrics read straight from the kernel's files: a handful of reads per sample and no child
 * process (systeminformation runs `df`, `lsblk`, `cat` and several commands per network interface on
 * every call, which cost the idle agent most of its CPU). A failing reading leaves its part null; the rest
 * of the sample still goes out. CPU percent is over the time since the previous sample, so the first
 * sample has none.
 */
export function createLinuxHostSampler(options: LinuxHostSamplerOptions = {}): () => Promise<HostMetrics> {
  const proc = options.procRoot ?? '/proc';
  const sys = options.sysRoot ?? '/sys';
  const fsStat = options.statfs ?? ((path: string) => statfs(path));
  let previousCpu: ProcStat | null = null;
  /** Block device name -> whether it is a disk (not a partition, not virtual); devices rarely change. */
  const disks = new Map<string, boolean>();

  function cpuPercent(stat: ProcStat | null): number | null {
    const previous = previousCpu;
    if (stat) previousCpu = stat;
    if (!stat || !previous) return null;
    const total = stat.totalTicks - previous.totalTicks;
    const idle = stat.idleTicks - previous.idleTicks;
    if (total <= 0 || idle < 0 || idle > total) return null;
    return ((total - idle) / total) * 100;
  }

  /**
   * Whole disks only, as systeminformation's disksIO counted them: partitions would count their disk's
   * IO twice, and virtual devices (loop, device mapper, md, zram, nbd) count IO of the disks below them.
   * A disk has an entry in /sys/block pointing outside /devices/virtual; optical and floppy drives are
   * not counted.
   */
  function isDisk(name: string): boolean {
    const known = disks.get(name);
    if (known !== undefined) return known;
    let disk = false;
    if (!/^(sr|fd)\d/.test(name)) {
      try {
        disk = !readlinkSync(join(sys, 'block', name)).includes('/devices/virtual/');
      } catch {
        // A partition: no entry of its own in /sys/block.
      }
    }
    disks.set(name, disk);
    return disk;
  }

  function diskIo(): HostMetrics['diskIo'] {
    const text = readKernelFile(join(proc, 'diskstats'));
    if (text === null) return null;
    let found = false;
    const io = { readOps: 0, writeOps: 0, readBytes: 0, writeBytes: 0 };
    for (const d of parseDiskstats(text)) {
      if (!isDisk(d.name)) continue;
      found = true;
      io.readOps += d.readOps;
      io.writeOps += d.writeOps;
      io.readBytes += d.readSectors * 512;
      io.writeBytes += d.writeSectors * 512;
    }
    return found ? io : null;
  }

  /**
   * Local filesystems with storage, one entry per device as `df` shows them: a device mounted at several
   * places (bind mounts, Docker's data root on the root disk) is listed at its whole-filesystem mount
   * with the shortest path.
   */
  async function filesystems(): Promise<HostMetrics['disks']> {
    const text = readKernelFile(join(proc, 'self', 'mountinfo'));
    if (text === null) return [];
    const byDevice = new Map<string, MountInfo>();
    for (const m of parseMountinfo(text)) {
      if (!isHostDisk(m.fsType, m.mountPoint) || isRemoteFs(m.fsType, m.source)) continue;
      const seen = byDevice.get(m.device);
      const better =
        !seen ||
        (m.root === '/' && seen.root !== '/') ||
        (m.root === seen.root && m.mountPoint.length < seen.mountPoint.length);
      if (better) byDevice.set(m.device, m);
    }
    const usage = await Promise.all(
      [...byDevice.values()].map(async (m) => {
        const s = await fsStat(m.mountPoint).catch(() => null);
        // Zero blocks: a kernel interface that is not in the known list; not storage.
        if (!s || s.blocks === 0) return null;
        return {
          mount: m.mountPoint,
          sizeBytes: s.blocks * s.bsize,
          usedBytes: (s.blocks - s.bfree) * s.bsize,
          availableBytes: s.bavail * s.bsize,
        };
      }),
    );
    return usage
      .filter((d): d is NonNullable<typeof d> => d !== null)
      .sort((a, b) => a.mount.localeCompare(b.mount));
  }

  return async function sample(): Promise<HostMetrics> {
    const fs = await filesystems();
    const statText = readKernelFile(join(proc, 'stat'));
    const memText = readKernelFile(join(proc, 'meminfo'));
    const netText = readKernelFile(join(proc, 'net', 'dev'));
    const io = diskIo();
    const mem = memText === null ? null : parseMeminfo(memText);
    const total = mem?.get('MemTotal') ?? null;
    const available = mem?.get('MemAvailable') ?? null;
    const [load1, load5, load15] = loadavg();
    return {
      cpuPercent: cpuPercent(statText === null ? null : parseProcStat(statText)),
      load1: load1 ?? null,
      load5: load5 ?? null,
      load15: load15 ?? null,
      memoryTotalBytes: total,
      memoryUsedBytes: total !== null && available !== null ? Math.max(0, total - available) : null,
      memoryAvailableBytes: available,
      disks: fs,
      diskIo: io,
      network: (netText === null ? [] : parseNetDev(netText))
        .filter((n) => isHostInterface(n.interface))
        .map((n) => ({
          interface: n.interface,
          rxBytes: n.rxBytes,
          txBytes: n.txBytes,
          rxErrors: n.rxErrors,
          txErrors: n.txErrors,
          rxDropped: n.rxDropped,
          txDropped: n.txDropped,
        })),
    };
  };
}

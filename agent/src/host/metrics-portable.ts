import { loadavg } from 'node:os';
import type { HostMetrics } from '@anvil/shared/protocol';
import si from 'systeminformation';
import { isHostDisk, isHostInterface, known } from './filters.ts';

/** A failing reading leaves its part null; the rest of the sample still goes out. */
async function orNull<T>(read: Promise<T>): Promise<T | null> {
  try {
    return await read;
  } catch {
    return null;
  }
}

/**
 * One sample of the host through systeminformation, for platforms without Linux's /proc (development
 * machines); on Linux metrics.ts reads the kernel's files instead, without child processes. CPU percent
 * is over the time since the previous call (systeminformation keeps that state), so the first sample
 * after start covers the time since the module loaded.
 */
export async function portableHostMetrics(): Promise<HostMetrics> {
  const [load, mem, disks, io, fs, net] = await Promise.all([
    orNull(si.currentLoad()),
    orNull(si.mem()),
    orNull(si.fsSize()),
    orNull(si.disksIO()),
    orNull(si.fsStats()),
    orNull(si.networkStats('*')),
  ]);
  const [load1, load5, load15] = loadavg();
  return {
    cpuPercent: known(load?.currentLoad),
    load1: load1 ?? null,
    load5: load5 ?? null,
    load15: load15 ?? null,
    memoryTotalBytes: known(mem?.total),
    memoryUsedBytes: mem ? known(mem.total - mem.available) : null,
    memoryAvailableBytes: known(mem?.available),
    disks: (disks ?? [])
      .filter((d) => isHostDisk(d.type, d.mount))
      .map((d) => ({
        mount: d.mount,
        sizeBytes: known(d.size),
        usedBytes: known(d.used),
        availableBytes: known(d.available),
      })),
    diskIo:
      io || fs
        ? {
            readOps: known(io?.rIO),
            writeOps: known(io?.wIO),
            readBytes: known(fs?.rx),
            writeBytes: known(fs?.wx),
          }
        : null,
    network: (net ?? [])
      .filter((n) => isHostInterface(n.iface))
      .map((n) => ({
        interface: n.iface,
        rxBytes: known(n.rx_bytes),
        txBytes: known(n.tx_bytes),
        rxErrors: known(n.rx_errors),
        txErrors: known(n.tx_errors),
        rxDropped: known(n.rx_dropped),
        txDropped: known(n.tx_dropped),
      })),
  };
}

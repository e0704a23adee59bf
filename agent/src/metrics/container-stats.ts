import type { ContainerMetrics } from '@anvil/shared/protocol';
import type { ContainerStats } from '../docker/runtime.ts';

/** CPU counters of a previous sample of the same container, for the percentage between the two. */
export interface CpuCounters {
  totalNs: number;
  systemNs: number;
}

/**
 * One reading of a container, whichever source took it (Docker's stats endpoint or the cgroup files
 * it reads): the same counters with Docker's meaning, so both give the same metrics.
 */
export interface ContainerCounters {
  cpuTotalNs: number | null;
  /** The host's CPU time over all CPUs, as Docker's `system_cpu_usage`: the base of the percentage. */
  systemCpuNs: number | null;
  onlineCpus: number | null;
  memoryUsageBytes: number | null;
  /** Page cache the kernel can reclaim: not counted as used, as `docker stats` does. */
  memoryInactiveFileBytes: number | null;
  memoryLimitBytes: number | null;
  /** Summed over the container's interfaces; null when it has none of its own (host or none network). */
  network: { rxBytes: number; txBytes: number } | null;
  blockReadBytes: number | null;
  blockWriteBytes: number | null;
}

type Loose = Record<string, unknown>;
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** Sum Docker's per-device block IO list for one operation (cgroup v1 says Read, v2 says read). */
function blockBytes(stats: ContainerStats, op: 'read' | 'write'): number | null {
  const list = (stats.blkio_stats as Loose | undefined)?.['io_service_bytes_recursive'];
  if (!Array.isArray(list)) return null;
  let total = 0;
  for (const entry of list as Loose[]) {
    if (String(entry['op']).toLowerCase() === op) total += num(entry['value']) ?? 0;
  }
  return total;
}

/** Docker's one-shot stats -> counters. */
export function countersFromDockerStats(stats: ContainerStats): ContainerCounters {
  const cpuStats = stats.cpu_stats as unknown as Loose | undefined;
  const usage = cpuStats?.['cpu_usage'] as Loose | undefined;
  const memory = stats.memory_stats as unknown as Loose | undefined;
  const memStats = (memory?.['stats'] ?? {}) as Loose;
  let network: ContainerCounters['network'] = null;
  for (const net of Object.values((stats.networks ?? {}) as Record<string, Loose>)) {
    network ??= { rxBytes: 0, txBytes: 0 };
    network.rxBytes += num(net['rx_bytes']) ?? 0;
    network.txBytes += num(net['tx_bytes']) ?? 0;
  }
  return {
    cpuTotalNs: num(usage?.['total_usage']),
    systemCpuNs: num(cpuStats?.['system_cpu_usage']),
    onlineCpus: num(cpuStats?.['online_cpus']),
    memoryUsageBytes: num(memory?.['usage']),
    memoryInactiveFileBytes: num(memStats['total_inactive_file']) ?? num(memStats['inactive_file']),
    memoryLimitBytes: num(memory?.['limit']),
    network,
    blockReadBytes: blockBytes(stats, 'read'),
    blockWriteBytes: blockBytes(stats, 'write'),
  };
}

/**
 * Counters -> the protocol's container metrics, with the CPU percentage over the time since the
 * previous sample computed as `docker stats` does (percent of one core).
 */
export function containerMetrics(
  workloadId: string,
  containerId: string,
  counters: ContainerCounters,
  previous: CpuCounters | null,
): { metrics: ContainerMetrics; cpu: CpuCounters | null } {
  const { cpuTotalNs: totalNs, systemCpuNs: systemNs } = counters;
  const cpu = totalNs !== null && systemNs !== null ? { totalNs, systemNs } : null;
  let cpuPercent: number | null = null;
  if (cpu && previous) {
    const cpuDelta = cpu.totalNs - previous.totalNs;
    const systemDelta = cpu.systemNs - previous.systemNs;
    if (systemDelta > 0 && cpuDelta >= 0)
      cpuPercent = (cpuDelta / systemDelta) * (counters.onlineCpus ?? 1) * 100;
  }
  const usage = counters.memoryUsageBytes;
  return {
    cpu,
    metrics: {
      workloadId,
      containerId,
      cpuPercent,
      cpuTotalNs: totalNs,
      memoryUsedBytes: usage === null ? null : Math.max(0, usage - (counters.memoryInactiveFileBytes ?? 0)),
      memoryLimitBytes: counters.memoryLimitBytes,
      networkRxBytes: counters.network?.rxBytes ?? null,
      networkTxBytes: counters.network?.txBytes ?? null,
      blockReadBytes: counters.blockReadBytes,
      blockWriteBytes: counters.blockWriteBytes,
    },
  };
}

import type { ContainerMetrics } from '@anvil/shared/protocol';
import type { ContainerStats } from '../docker/runtime.ts';

/** CPU counters of a previous sample of the same container, for the percentage between the two. */
export interface CpuCounters {
  totalNs: number;
  systemNs: number;
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

/**
 * Docker stats (one-shot) -> the protocol's container metrics. Memory excludes the page cache the
 * kernel can reclaim, as `docker stats` does.
 */
export function containerMetrics(
  workloadId: string,
  containerId: string,
  stats: ContainerStats,
  previous: CpuCounters | null,
): { metrics: ContainerMetrics; cpu: CpuCounters | null } {
  const cpuStats = stats.cpu_stats as unknown as Loose | undefined;
  const usage = cpuStats?.['cpu_usage'] as Loose | undefined;
  const totalNs = num(usage?.['total_usage']);
  const systemNs = num(cpuStats?.['system_cpu_usage']);
  const onlineCpus = num(cpuStats?.['online_cpus']) ?? 1;
  const cpu = totalNs !== null && systemNs !== null ? { totalNs, systemNs } : null;
  let cpuPercent: number | null = null;
  if (cpu && previous) {
    const cpuDelta = cpu.totalNs - previous.totalNs;
    const systemDelta = cpu.systemNs - previous.systemNs;
    if (systemDelta > 0 && cpuDelta >= 0) cpuPercent = (cpuDelta / systemDelta) * onlineCpus * 100;
  }

  const memory = stats.memory_stats as unknown as Loose | undefined;
  const memStats = (memory?.['stats'] ?? {}) as Loose;
  const usageBytes = num(memory?.['usage']);
  const inactive = num(memStats['total_inactive_file']) ?? num(memStats['inactive_file']) ?? 0;

  let rx: number | null = null;
  let tx: number | null = null;
  for (const net of Object.values((stats.networks ?? {}) as Record<string, Loose>)) {
    rx = (rx ?? 0) + (num(net['rx_bytes']) ?? 0);
    tx = (tx ?? 0) + (num(net['tx_bytes']) ?? 0);
  }

  return {
    cpu,
    metrics: {
      workloadId,
      containerId,
      cpuPercent,
      cpuTotalNs: totalNs,
      memoryUsedBytes: usageBytes === null ? null : Math.max(0, usageBytes - inactive),
      memoryLimitBytes: num(memory?.['limit']),
      networkRxBytes: rx,
      networkTxBytes: tx,
      blockReadBytes: blockBytes(stats, 'read'),
      blockWriteBytes: blockBytes(stats, 'write'),
    },
  };
}

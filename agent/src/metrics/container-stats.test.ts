import { describe, expect, it } from 'vitest';
import type { ContainerStats } from '../docker/runtime.ts';
import { containerMetrics, countersFromDockerStats } from './container-stats.ts';

// Shaped like Docker 20.10's one-shot stats on cgroup v2 (trimmed to the fields read).
const stats = (totalNs: number, systemNs: number) =>
  ({
    cpu_stats: { cpu_usage: { total_usage: totalNs }, system_cpu_usage: systemNs, online_cpus: 2 },
    memory_stats: { usage: 50_000_000, limit: 100_000_000, stats: { inactive_file: 10_000_000 } },
    networks: { eth0: { rx_bytes: 1_000, tx_bytes: 2_000 }, eth1: { rx_bytes: 5, tx_bytes: 7 } },
    blkio_stats: {
      io_service_bytes_recursive: [
        { major: 8, minor: 0, op: 'read', value: 4096 },
        { major: 8, minor: 0, op: 'write', value: 8192 },
        { major: 8, minor: 16, op: 'Read', value: 4 },
      ],
    },
  }) as unknown as ContainerStats;

describe('container metrics from docker stats', () => {
  it('maps counters and leaves cpu percent unknown on the first sample', () => {
    const { metrics, cpu } = containerMetrics('w', 'c', countersFromDockerStats(stats(1e9, 100e9)), null);
    expect(metrics).toEqual({
      workloadId: 'w',
      containerId: 'c',
      cpuPercent: null,
      cpuTotalNs: 1e9,
      memoryUsedBytes: 40_000_000,
      memoryLimitBytes: 100_000_000,
      networkRxBytes: 1_005,
      networkTxBytes: 2_007,
      blockReadBytes: 4100,
      blockWriteBytes: 8192,
    });
    expect(cpu).toEqual({ totalNs: 1e9, systemNs: 100e9 });
  });

  it('computes cpu percent between two samples, per core as docker stats does', () => {
    const { metrics } = containerMetrics('w', 'c', countersFromDockerStats(stats(2e9, 104e9)), {
      totalNs: 1e9,
      systemNs: 100e9,
    });
    expect(metrics.cpuPercent).toBeCloseTo(50);
  });

  it('gives null, not zero, for what Docker did not report', () => {
    const { metrics } = containerMetrics('w', 'c', countersFromDockerStats({} as ContainerStats), null);
    expect(metrics).toMatchObject({
      cpuTotalNs: null,
      memoryUsedBytes: null,
      networkRxBytes: null,
      networkTxBytes: null,
      blockReadBytes: null,
    });
  });
});

import { type Static, Type } from '@sinclair/typebox';
import { EpochMs, Nullable, WorkloadId } from './common.ts';
import { GpuHealth } from './gpu-health.ts';

/**
 * Counters (bytes, operations) are cumulative since boot or container start, as the kernel and Docker
 * report them: a lost sample costs resolution, not totals, and the control plane derives rates.
 */
const Counter = Nullable(Type.Number({ minimum: 0 }));
const Gauge = Nullable(Type.Number());

export const HostMetrics = Type.Object({
  cpuPercent: Gauge,
  load1: Gauge,
  load5: Gauge,
  load15: Gauge,
  memoryTotalBytes: Counter,
  memoryUsedBytes: Counter,
  memoryAvailableBytes: Counter,
  disks: Type.Array(
    Type.Object({ mount: Type.String(), sizeBytes: Counter, usedBytes: Counter, availableBytes: Counter }),
  ),
  diskIo: Nullable(
    Type.Object({ readOps: Counter, writeOps: Counter, readBytes: Counter, writeBytes: Counter }),
  ),
  network: Type.Array(
    Type.Object({
      interface: Type.String(),
      rxBytes: Counter,
      txBytes: Counter,
      rxErrors: Counter,
      txErrors: Counter,
      rxDropped: Counter,
      txDropped: Counter,
    }),
  ),
});
export type HostMetrics = Static<typeof HostMetrics>;

export const GpuProcess = Type.Object({ pid: Type.Integer(), usedMemoryBytes: Counter });

export const GpuMetrics = Type.Object({
  index: Type.Integer({ minimum: 0 }),
  uuid: Type.String(),
  utilizationPercent: Gauge,
  memoryUtilizationPercent: Gauge,
  memoryUsedBytes: Counter,
  memoryTotalBytes: Counter,
  temperatureC: Gauge,
  powerWatts: Gauge,
  smClockMhz: Gauge,
  memoryClockMhz: Gauge,
  processes: Type.Array(GpuProcess),
  /** Absent from agents older than GPU health, and from simulated GPUs that declare none. */
  health: Type.Optional(GpuHealth),
});
export type GpuMetrics = Static<typeof GpuMetrics>;

export const ContainerMetrics = Type.Object({
  workloadId: WorkloadId,
  containerId: Type.String(),
  /** Percent of one core (200 = two cores busy), computed by the agent from Docker's cpu counters. */
  cpuPercent: Gauge,
  cpuTotalNs: Counter,
  memoryUsedBytes: Counter,
  memoryLimitBytes: Counter,
  networkRxBytes: Counter,
  networkTxBytes: Counter,
  blockReadBytes: Counter,
  blockWriteBytes: Counter,
  /** Writable layer plus volume as last measured (the agent measures each workload every minute or so). */
  diskUsedBytes: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
  /** The workload's disk bound (storage_gb); null when it has none. */
  diskLimitBytes: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
});
export type ContainerMetrics = Static<typeof ContainerMetrics>;

export const MetricSample = Type.Object({
  at: EpochMs,
  host: Nullable(HostMetrics),
  gpus: Type.Array(GpuMetrics),
  containers: Type.Array(ContainerMetrics),
});
export type MetricSample = Static<typeof MetricSample>;

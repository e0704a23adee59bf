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

/**
 * A snapshot image (`docker commit` of a cluster, tagged under `anvil-snapshots/<account>/<cluster>`) as
 * the engine lists it. `ownBytes` is what the snapshot adds to the image it was committed from (its size
 * less its parent's), the bytes the snapshot alone keeps on the host; null when the parent is unknown.
 */
export const SnapshotImageUsage = Type.Object({
  imageId: Type.String({ minLength: 1, maxLength: 200 }),
  repository: Type.String({ minLength: 1, maxLength: 300 }),
  /** The image's `anvil.workload` label: the cluster it was committed from. */
  workloadId: Nullable(Type.String({ maxLength: 200 })),
  sizeBytes: Nullable(Type.Integer({ minimum: 0 })),
  ownBytes: Nullable(Type.Integer({ minimum: 0 })),
});
export type SnapshotImageUsage = Static<typeof SnapshotImageUsage>;

export const MetricSample = Type.Object({
  at: EpochMs,
  host: Nullable(HostMetrics),
  gpus: Type.Array(GpuMetrics),
  containers: Type.Array(ContainerMetrics),
  /**
   * Every snapshot image on the host, in the samples where the agent listed them (about once a minute);
   * absent from the others and from agents older than snapshot metering.
   */
  snapshots: Type.Optional(Type.Array(SnapshotImageUsage, { maxItems: 10_000 })),
});
export type MetricSample = Static<typeof MetricSample>;

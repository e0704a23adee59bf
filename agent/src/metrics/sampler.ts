import type { MetricSample } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { type Clock, sleep } from '../clock.ts';
import type { ContainerRuntime } from '../docker/runtime.ts';
import { errorMessage } from '../errors.ts';
import type { GpuProvider } from '../gpu/provider.ts';
import type { HostProvider } from '../host/provider.ts';
import type { RunningContainer } from '../reconcile/reconciler.ts';
import { ContainerStatsReader, dockerIsLocal } from './container-reader.ts';
import type { DiskMeter } from './disk-usage.ts';
import type { SnapshotMeter } from './snapshot-meter.ts';

/** Disk figures for the container metrics: the meter and what it needs to know of each workload. */
export interface SamplerDisk {
  meter: DiskMeter;
  volumeDirOf: (workloadId: string) => string | null;
  limitOf: (workloadId: string) => number | null;
}

export interface MetricsSamplerOptions {
  host: HostProvider;
  gpu: GpuProvider;
  runtime: ContainerRuntime;
  running: () => RunningContainer[];
  clock: Clock;
  logger: Logger;
  /** Samples kept while they cannot be sent; the oldest go first and are counted. */
  maxSamples: number;
  disk?: SamplerDisk | null;
  /** Snapshot images for storage metering; null or absent: samples carry none. */
  snapshots?: SnapshotMeter | null;
}

/**
 * Samples host, GPUs and containers at the interval the control plane sets. Samples accumulate until
 * sent (the connection takes them in batches), bounded so a long outage costs old samples, not memory.
 */
export class MetricsSampler {
  readonly #o: MetricsSamplerOptions;
  #samples: MetricSample[] = [];
  #dropped = 0;
  #intervalMs: number | null = null;
  #wake: (() => void) | null = null;
  readonly #containers: ContainerStatsReader;

  constructor(options: MetricsSamplerOptions) {
    this.#o = options;
    // Containers' cgroup files are readable when their processes run on this machine.
    const local = process.platform === 'linux' && dockerIsLocal(process.env);
    this.#containers = new ContainerStatsReader({
      runtime: options.runtime,
      logger: options.logger,
      procRoot: local ? '/proc' : null,
    });
  }

  /** Set by the control plane (welcome, set_intervals); sampling starts once it is known. */
  setInterval(ms: number): void {
    this.#intervalMs = ms;
    this.#wake?.();
  }

  get pending(): number {
    return this.#samples.length;
  }

  /** Take up to `max` samples and the count dropped since the last take. */
  take(max: number): { samples: MetricSample[]; dropped: number } {
    const samples = this.#samples.splice(0, max);
    const dropped = this.#dropped;
    this.#dropped = 0;
    return { samples, dropped };
  }

  /** Samples that could not be sent go back to the front. */
  requeue(batch: { samples: MetricSample[]; dropped: number }): void {
    this.#samples.unshift(...batch.samples);
    this.#dropped += batch.dropped;
    this.#trim();
  }

  async run(signal: AbortSignal): Promise<void> {
    const { clock } = this.#o;
    while (!signal.aborted) {
      if (this.#intervalMs === null) {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
          signal.addEventListener('abort', () => resolve(), { once: true });
        });
        this.#wake = null;
        continue;
      }
      const started = clock.now();
      try {
        this.#samples.push(await this.sample());
        this.#trim();
      } catch (err) {
        this.#o.logger.warn({ err: errorMessage(err) }, 'metrics sample failed');
      }
      await sleep(clock, Math.max(0, this.#intervalMs - (clock.now() - started)), signal);
    }
  }

  async sample(): Promise<MetricSample> {
    const { host, gpu, clock, logger } = this.#o;
    const at = clock.now();
    const [hostSample, gpus, containers, snapshots] = await Promise.all([
      host.sample().catch((err: unknown) => {
        logger.debug({ err: errorMessage(err) }, 'host sample failed');
        return null;
      }),
      gpu.sample().catch((err: unknown) => {
        logger.debug({ err: errorMessage(err) }, 'gpu sample failed');
        return [];
      }),
      this.#containers.read(this.#o.running()),
      this.#snapshots(),
    ]);
    const extra = snapshots ? { snapshots } : {};
    const disk = this.#o.disk;
    if (!disk) return { at, host: hostSample, gpus, containers, ...extra };
    // In the background: a volume walk must not delay the sample; its figures show in the next ones.
    disk.meter
      .measure(this.#o.running().map((r) => ({ ...r, volumeDir: disk.volumeDirOf(r.workloadId) })))
      .catch((err: unknown) => logger.debug({ err: errorMessage(err) }, 'disk measure failed'));
    const withDisk = containers.map((c) => ({
      ...c,
      diskUsedBytes: disk.meter.usage(c.workloadId)?.usedBytes ?? null,
      diskLimitBytes: disk.limitOf(c.workloadId),
    }));
    return { at, host: hostSample, gpus, containers: withDisk, ...extra };
  }

  async #snapshots() {
    try {
      return (await this.#o.snapshots?.due()) ?? null;
    } catch (err) {
      this.#o.logger.debug({ err: errorMessage(err) }, 'snapshot listing failed');
      return null;
    }
  }

  #trim(): void {
    const excess = this.#samples.length - this.#o.maxSamples;
    if (excess > 0) {
      this.#samples.splice(0, excess);
      this.#dropped += excess;
    }
  }
}

import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { errorMessage } from '../errors.ts';

/**
 * Bytes a directory tree takes on disk (allocated blocks, as `du` counts them), symbolic links not
 * followed, a file with several hard links counted once. 0 for a directory that does not exist.
 */
export async function directoryBytes(root: string): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const stack = [root];
  while (stack.length > 0) {
    const path = stack.pop()!;
    let stats: Awaited<ReturnType<typeof lstat>>;
    try {
      stats = await lstat(path, { bigint: false });
    } catch {
      continue; // removed while we walked, or never there
    }
    const key = `${stats.dev}:${stats.ino}`;
    if (seen.has(key)) continue;
    seen.add(key);
    total += Number(stats.blocks) * 512;
    if (stats.isDirectory()) {
      const names = await readdir(path).catch(() => [] as string[]);
      for (const name of names) stack.push(join(path, name));
    }
  }
  return total;
}

export interface DiskUsage {
  /** Writable layer plus volume. */
  usedBytes: number;
  layerBytes: number | null;
  volumeBytes: number | null;
  at: number;
}

export interface MeasuredWorkload {
  workloadId: string;
  containerId: string;
  /** The workload's volume directory on the host, or null when it has none. */
  volumeDir: string | null;
}

export interface DiskMeterOptions {
  /** The container's writable layer in bytes (`docker inspect --size`: SizeRw), null when unknown. */
  layerBytes: (containerId: string) => Promise<number | null>;
  clock: Clock;
  logger: Logger;
  /** A workload is measured at most this often: walking a large volume costs I/O. */
  everyMs: number;
  /** After a round that measured something: the reconciler compares the figures with the workloads' bounds. */
  onMeasured?: () => void;
}

/**
 * Measures each running workload's disk (storage_gb covers its writable layer and its volume), for the
 * metrics (disk_used) and for the over-quota status. Where the engine cannot bound the writable layer
 * (see storage-quota.ts) this measure is the only check, and it is after the fact.
 */
export class DiskMeter {
  readonly #o: DiskMeterOptions;
  readonly #last = new Map<string, DiskUsage>();
  #busy = false;

  constructor(options: DiskMeterOptions) {
    this.#o = options;
  }

  usage(workloadId: string): DiskUsage | null {
    return this.#last.get(workloadId) ?? null;
  }

  /** Measures the workloads that are due; one round at a time, others return at once. */
  async measure(workloads: MeasuredWorkload[]): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      const now = this.#o.clock.now();
      const live = new Set(workloads.map((w) => w.workloadId));
      for (const id of [...this.#last.keys()]) if (!live.has(id)) this.#last.delete(id);
      let measured = 0;
      for (const w of workloads) {
        const last = this.#last.get(w.workloadId);
        if (last && now - last.at < this.#o.everyMs) continue;
        try {
          const [layerBytes, volumeBytes] = await Promise.all([
            this.#o.layerBytes(w.containerId),
            w.volumeDir ? directoryBytes(w.volumeDir) : Promise.resolve(null),
          ]);
          this.#last.set(w.workloadId, {
            usedBytes: (layerBytes ?? 0) + (volumeBytes ?? 0),
            layerBytes,
            volumeBytes,
            at: this.#o.clock.now(),
          });
          measured += 1;
        } catch (err) {
          this.#o.logger.debug({ workloadId: w.workloadId, err: errorMessage(err) }, 'disk measure failed');
        }
      }
      if (measured > 0) this.#o.onMeasured?.();
    } finally {
      this.#busy = false;
    }
  }
}

/** The customer's words for a workload over its disk bound; null when within it or not measured. */
export function overQuotaReason(
  usage: DiskUsage | null,
  limitBytes: number | null | undefined,
): string | null {
  if (!usage || !limitBytes || usage.usedBytes <= limitBytes) return null;
  const size = (n: number) =>
    n >= 1024 ** 3 ? `${(n / 1024 ** 3).toFixed(2)} GB` : `${(n / 1024 ** 2).toFixed(1)} MB`;
  return `disk over quota: ${size(usage.usedBytes)} used of ${size(limitBytes)} (storage_gb counts the container's files and its volume); delete files to get back under it`;
}

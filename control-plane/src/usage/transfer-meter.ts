import type { Socket } from 'node:net';
import { newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';

/** What a workload's spec labels say it belongs to (clusters/service.ts, serverless/workers.ts, training). */
const RESOURCE_LABELS = [
  ['anvil.cluster', 'cluster'],
  ['anvil.endpoint', 'endpoint'],
  ['anvil.training-job', 'training_job'],
] as const;

export interface TransferMeterOptions {
  db: Database;
  clock: Clock;
  logger: Logger;
  /** USD per GB (10^9 bytes) in either direction; 0 meters without charging. */
  pricePerGb: number;
  /** How often open streams' bytes so far become records (default 60 s); nothing runs while idle. */
  flushIntervalMs?: number;
}

interface Tally {
  bytes: number;
  since: Date;
}

interface ResourceTally extends Tally {
  accountId: string;
  resourceType: string;
  resourceId: string;
  channel: string;
}

interface Tracker {
  workloadId: string;
  channel: string;
  counted: number;
  total(): number;
}

/**
 * Data transfer as usage records (kind `transfer`, unit GB): bytes in both directions through the
 * reverse tunnels into workloads (the HTTPS port proxy, the SSH relay, port forwards, terminals) and
 * through dataset downloads. Open streams are read every flush interval, so a day-long SSH session is
 * billed as it goes, not when it closes; a timer runs only while a stream is open or bytes wait. A failed
 * write keeps the bytes for the next flush; what a killed process had not written yet (at most one
 * interval) is lost, which the README states.
 */
export class TransferMeter {
  readonly #o: TransferMeterOptions;
  /** Bytes per workload and channel, waiting to be written. */
  #workloads = new Map<string, Tally & { workloadId: string; channel: string }>();
  #resources = new Map<string, ResourceTally>();
  readonly #trackers = new Set<Tracker>();
  #timer: NodeJS.Timeout | null = null;
  #stopped = false;
  #flushing: Promise<void> = Promise.resolve();

  constructor(options: TransferMeterOptions) {
    this.#o = options;
  }

  /** Meters a socket carrying a workload's tunnel, both directions, from now until it closes. */
  trackSocket(workloadId: string, channel: string, socket: Socket): void {
    if (socket.destroyed) return;
    const total = () => socket.bytesRead + socket.bytesWritten;
    const tracker: Tracker = { workloadId, channel, counted: total(), total };
    this.#trackers.add(tracker);
    socket.once('close', () => {
      this.#collect(tracker);
      this.#trackers.delete(tracker);
    });
    this.#schedule();
  }

  /** Bytes that belong to a resource directly (a dataset download). */
  recordResource(
    accountId: string,
    resourceType: string,
    resourceId: string,
    channel: string,
    bytes: number,
  ): void {
    if (bytes <= 0) return;
    const key = `${accountId}\u0000${resourceType}\u0000${resourceId}\u0000${channel}`;
    const tally = this.#resources.get(key);
    if (tally) tally.bytes += bytes;
    else
      this.#resources.set(key, {
        accountId,
        resourceType,
        resourceId,
        channel,
        bytes,
        since: this.#o.clock.now(),
      });
    this.#schedule();
  }

  #collect(tracker: Tracker): void {
    const delta = tracker.total() - tracker.counted;
    if (delta <= 0) return;
    tracker.counted += delta;
    const key = `${tracker.workloadId}\u0000${tracker.channel}`;
    const tally = this.#workloads.get(key);
    if (tally) tally.bytes += delta;
    else
      this.#workloads.set(key, {
        workloadId: tracker.workloadId,
        channel: tracker.channel,
        bytes: delta,
        since: this.#o.clock.now(),
      });
    this.#schedule();
  }

  #schedule(): void {
    if (this.#timer || this.#stopped) return;
    const busy = this.#trackers.size > 0 || this.#workloads.size > 0 || this.#resources.size > 0;
    if (!busy) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush().finally(() => this.#schedule());
    }, this.#o.flushIntervalMs ?? 60_000);
    this.#timer.unref();
  }

  /** Writes what was metered so far as usage records (one per resource and channel). */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#write());
    return this.#flushing;
  }

  async #write(): Promise<void> {
    for (const tracker of this.#trackers) this.#collect(tracker);
    const workloads = this.#workloads;
    const resources = this.#resources;
    if (workloads.size === 0 && resources.size === 0) return;
    this.#workloads = new Map();
    this.#resources = new Map();
    try {
      const rows = await this.#resolve([...workloads.values()]);
      const now = this.#o.clock.now();
      const records = [...rows, ...resources.values()].map((t) => {
        const gb = t.bytes / 1e9;
        return {
          id: newId('use'),
          accountId: t.accountId,
          resourceType: t.resourceType,
          resourceId: t.resourceId,
          kind: 'transfer',
          quantity: gb,
          unit: 'GB',
          cost: gb * this.#o.pricePerGb,
          startedAt: t.since,
          endedAt: now,
          metadata: { bytes: t.bytes, channel: t.channel },
        };
      });
      if (records.length > 0) await this.#o.db.prisma.usageRecord.createMany({ data: records });
    } catch (error) {
      // Kept for the next flush rather than lost: the bytes were carried, so they are owed.
      for (const [key, tally] of workloads) this.#merge(this.#workloads, key, tally);
      for (const [key, tally] of resources) this.#merge(this.#resources, key, tally);
      this.#o.logger.warn({ err: error }, 'writing data transfer usage failed; kept for the next flush');
    }
  }

  #merge<T extends Tally>(into: Map<string, T>, key: string, tally: T): void {
    const current = into.get(key);
    if (!current) into.set(key, tally);
    else {
      current.bytes += tally.bytes;
      if (tally.since < current.since) current.since = tally.since;
    }
  }

  /** The account and resource behind each workload's bytes, read from its row and spec labels. */
  async #resolve(tallies: (Tally & { workloadId: string; channel: string })[]): Promise<ResourceTally[]> {
    if (tallies.length === 0) return [];
    const ids = [...new Set(tallies.map((t) => t.workloadId))];
    const rows = await this.#o.db.prisma.workload.findMany({
      where: { id: { in: ids } },
      select: { id: true, kind: true, ownerAccountId: true, spec: true },
    });
    const byId = new Map(rows.map((row) => [row.id, row]));
    const out: ResourceTally[] = [];
    for (const tally of tallies) {
      const row = byId.get(tally.workloadId);
      if (!row) {
        this.#o.logger.warn(
          { workload_id: tally.workloadId, bytes: tally.bytes },
          'transfer of an unknown workload',
        );
        continue;
      }
      const labels = (row.spec as { labels?: Record<string, string> } | null)?.labels ?? {};
      const found = RESOURCE_LABELS.find(([label]) => labels[label]);
      out.push({
        accountId: row.ownerAccountId,
        resourceType: found ? found[1] : row.kind,
        resourceId: found ? (labels[found[0]] as string) : row.id,
        channel: tally.channel,
        bytes: tally.bytes,
        since: tally.since,
      });
    }
    return out;
  }

  /** Stops the timer and writes what is left (graceful shutdown); later bytes are written by flush() only. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.flush();
  }
}

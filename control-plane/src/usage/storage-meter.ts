import { newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { PassLoop } from '../util/pass-loop.ts';

/** Held for a pass's transaction, so two replicas never bill the same hours twice. */
const METER_LOCK = 7245318014;
const HOUR_MS = 3_600_000;

export interface StorageMeterOptions {
  db: Database;
  clock: Clock;
  /** USD per GB-hour (GB = 10^9 bytes); 0 meters without charging. */
  pricePerGbHour: number;
  /** Seconds between passes; 0: no timer (pass() still works). */
  intervalSeconds: number;
  onError: (error: unknown) => void;
}

/**
 * Storage as usage records (kind `storage`, unit GB-hours): the bytes of every stored dataset version,
 * from the version's creation (or the end of the dataset's last storage record) to the pass. Each pass
 * bills the time since the previous one, per dataset, so the records tile time without gaps or overlap;
 * the watermark is the records themselves (their endedAt), so a restart or another replica continues
 * where the last pass stopped. A dataset deleted between passes is billed up to the last pass before it.
 */
export class StorageMeter {
  readonly #o: StorageMeterOptions;
  readonly #loop: PassLoop<number>;

  constructor(options: StorageMeterOptions) {
    this.#o = options;
    this.#loop = new PassLoop({
      run: () => this.pass(),
      after: () => options.intervalSeconds * 1000,
      failedMs: 60_000,
      onError: options.onError,
    });
  }

  start(): void {
    if (this.#o.intervalSeconds > 0) this.#loop.start();
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** Bills stored bytes up to now; returns how many records it wrote. */
  async pass(): Promise<number> {
    const { db, clock, pricePerGbHour } = this.#o;
    return db.prisma.$transaction(async (tx) => {
      await tx.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(${METER_LOCK})`);
      const now = clock.now();
      const [rows, versions, billed] = await Promise.all([
        tx.dataset.findMany({ select: { id: true, accountId: true, createdById: true } }),
        tx.datasetVersion.findMany({ select: { datasetId: true, sizeBytes: true, createdAt: true } }),
        tx.usageRecord.groupBy({
          by: ['resourceId'],
          where: { kind: 'storage', resourceType: 'dataset' },
          _max: { endedAt: true },
        }),
      ]);
      const billedUntil = new Map(billed.map((row) => [row.resourceId, row._max.endedAt]));
      const versionsOf = new Map<string, { sizeBytes: bigint; createdAt: Date }[]>();
      for (const version of versions) {
        const list = versionsOf.get(version.datasetId) ?? [];
        list.push(version);
        versionsOf.set(version.datasetId, list);
      }
      const datasets = rows.map((row) => ({ ...row, versions: versionsOf.get(row.id) ?? [] }));
      const records = [];
      for (const dataset of datasets) {
        const since = billedUntil.get(dataset.id) ?? null;
        let gbHours = 0;
        let bytes = 0;
        let start: Date | null = null;
        for (const version of dataset.versions) {
          // Each version from when it was stored, or from where the last record ended.
          const from = since && since > version.createdAt ? since : version.createdAt;
          if (from >= now) continue;
          const size = Number(version.sizeBytes);
          bytes += size;
          gbHours += (size / 1e9) * ((now.getTime() - from.getTime()) / HOUR_MS);
          if (!start || from < start) start = from;
        }
        if (!start || bytes === 0) continue;
        records.push({
          id: newId('use'),
          accountId: dataset.accountId,
          userId: dataset.createdById,
          resourceType: 'dataset',
          resourceId: dataset.id,
          kind: 'storage',
          quantity: gbHours,
          unit: 'GB-hours',
          cost: gbHours * pricePerGbHour,
          startedAt: start,
          endedAt: now,
          metadata: { bytes, versions: dataset.versions.length },
        });
      }
      if (records.length > 0) await tx.usageRecord.createMany({ data: records });
      return records.length;
    });
  }
}

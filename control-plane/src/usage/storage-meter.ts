import { newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { PassLoop } from '../util/pass-loop.ts';
import { artifactStorageRecords } from './artifact-storage.ts';

type Tx = Parameters<Parameters<Database['prisma']['$transaction']>[0]>[0];

/** Held for a pass's transaction, so two replicas never bill the same hours twice. */
const METER_LOCK = 7245318014;
const HOUR_MS = 3_600_000;
/** A workload's last disk figure counts this long after it was taken (the agent measures about once a minute). */
const SAMPLE_VALID_MS = 5 * 60_000;
/** How far back a workload never billed before is looked at (raw samples are not kept much longer). */
const FIRST_LOOKBACK_MS = 24 * HOUR_MS;
/** What a workload's spec labels say it belongs to (as in transfer-meter.ts). */
const RESOURCE_LABELS = [
  ['anvil.cluster', 'cluster'],
  ['anvil.endpoint', 'endpoint'],
  ['anvil.training-job', 'training_job'],
] as const;

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
 * Storage as usage records (kind `storage`, unit GB-hours). Workloads' disks: the agent's measured disk
 * (writable layer plus volume, `diskUsedBytes` of its container samples), each sample's figure held until
 * the next one (at most SAMPLE_VALID_MS), billed to the cluster, endpoint or training job the workload
 * belongs to (metadata.source `workload_disk`). Datasets: the bytes of every stored dataset version,
 * from the version's creation (or the end of the dataset's last storage record) to the pass. Each pass
 * bills the time since the previous one, per dataset, so the records tile time without gaps or overlap;
 * the watermark is the records themselves (their endedAt), so a restart or another replica continues
 * where the last pass stopped. A dataset deleted between passes is billed up to the last pass before it.
 * Training artifacts kept on hosts after their job's containers are gone: artifact-storage.ts.
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

  #first: NodeJS.Timeout | null = null;

  /**
   * The first pass comes min(interval, 5 min) after start, not at once: a start-up stays quiet, and the
   * records' watermark means nothing is lost by waiting (the pass bills from where the last one ended).
   */
  start(): void {
    if (this.#o.intervalSeconds <= 0 || this.#first) return;
    this.#first = setTimeout(() => this.#loop.start(), Math.min(this.#o.intervalSeconds, 300) * 1000);
    this.#first.unref();
  }

  stop(): Promise<void> {
    if (this.#first) clearTimeout(this.#first);
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
      records.push(...(await this.#workloadDisks(tx, now)));
      records.push(...(await this.#snapshotImages(tx, now)));
      records.push(...(await artifactStorageRecords(tx, now, pricePerGbHour)));
      if (records.length > 0) await tx.usageRecord.createMany({ data: records });
      return records.length;
    });
  }

  /** GB-hours of workloads' measured disks since each resource's last disk record, from container samples. */
  async #workloadDisks(tx: Tx, now: Date) {
    const billed = await tx.usageRecord.findMany({
      where: { kind: 'storage', resourceType: { in: ['cluster', 'endpoint', 'training_job'] } },
      select: { resourceType: true, resourceId: true, endedAt: true },
      orderBy: { endedAt: 'desc' },
      distinct: ['resourceType', 'resourceId'],
    });
    const billedUntil = new Map(billed.map((r) => [`${r.resourceType}:${r.resourceId}`, r.endedAt]));
    const from = new Date(now.getTime() - FIRST_LOOKBACK_MS - SAMPLE_VALID_MS);
    const samples = await tx.metricSample.findMany({
      where: { kind: 'container', at: { gt: from, lte: now } },
      select: { series: true, at: true, data: true },
      orderBy: [{ series: 'asc' }, { at: 'asc' }],
    });
    const bySeries = new Map<string, { at: Date; used: number }[]>();
    for (const sample of samples) {
      const used = (sample.data as Record<string, unknown> | null)?.['diskUsedBytes'];
      if (typeof used !== 'number') continue;
      const list = bySeries.get(sample.series) ?? [];
      list.push({ at: sample.at, used });
      bySeries.set(sample.series, list);
    }
    if (bySeries.size === 0) return [];
    const workloads = await tx.workload.findMany({
      where: { id: { in: [...bySeries.keys()] } },
      select: { id: true, kind: true, ownerAccountId: true, spec: true },
    });
    // Several workloads may belong to one resource (an endpoint's workers): summed into one record.
    const totals = new Map<
      string,
      {
        accountId: string;
        resourceType: string;
        resourceId: string;
        gbHours: number;
        start: Date;
        peak: number;
      }
    >();
    for (const workload of workloads) {
      const labels = (workload.spec as { labels?: Record<string, string> } | null)?.labels ?? {};
      const found = RESOURCE_LABELS.find(([label]) => labels[label]);
      const resourceType = found ? found[1] : workload.kind;
      const resourceId = found ? (labels[found[0]] as string) : workload.id;
      const key = `${resourceType}:${resourceId}`;
      const since = billedUntil.get(key) ?? new Date(now.getTime() - FIRST_LOOKBACK_MS);
      const { gbHours, start, peak } = heldGbHours(bySeries.get(workload.id) ?? [], since, now);
      if (!start || gbHours <= 0) continue;
      const total = totals.get(key);
      if (total) {
        total.gbHours += gbHours;
        total.peak = Math.max(total.peak, peak);
        if (start < total.start) total.start = start;
      } else {
        totals.set(key, {
          accountId: workload.ownerAccountId,
          resourceType,
          resourceId,
          gbHours,
          start,
          peak,
        });
      }
    }
    return [...totals.values()].map((t) => ({
      id: newId('use'),
      accountId: t.accountId,
      userId: null,
      resourceType: t.resourceType,
      resourceId: t.resourceId,
      kind: 'storage',
      quantity: t.gbHours,
      unit: 'GB-hours',
      cost: t.gbHours * this.#o.pricePerGbHour,
      startedAt: t.start,
      endedAt: now,
      metadata: { source: 'workload_disk', peakBytes: t.peak },
    }));
  }

  /**
   * GB-hours of cluster snapshots kept on hosts, from the agents' image listings (kind `snapshot` samples):
   * each image's own bytes (what it adds to the image it was committed from), billed per image to the
   * account of the cluster it was taken from, as long as it is on the host, also after the cluster is
   * deleted. A listing counts only where the repository names the account and cluster of a workload
   * placed on the reporting host, so a host can bill nobody for images it was not given.
   */
  async #snapshotImages(tx: Tx, now: Date) {
    const from = new Date(now.getTime() - FIRST_LOOKBACK_MS - SAMPLE_VALID_MS);
    const samples = await tx.metricSample.findMany({
      where: { kind: 'snapshot', at: { gt: from, lte: now } },
      select: { hostId: true, series: true, at: true, data: true, info: true },
      orderBy: [{ series: 'asc' }, { at: 'asc' }],
    });
    if (samples.length === 0) return [];
    const byImage = new Map<string, { hostId: string; clusterId: string; accountId: string; list: Held[] }>();
    for (const sample of samples) {
      const data = sample.data as Record<string, unknown> | null;
      const own = data?.['ownBytes'] ?? data?.['sizeBytes'];
      const named = repositoryOwner((sample.info as { repository?: unknown } | null)?.repository);
      if (typeof own !== 'number' || !named) continue;
      const key = `${sample.hostId} ${sample.series}`;
      const entry = byImage.get(key) ?? { hostId: sample.hostId, ...named, list: [] };
      entry.list.push({ at: sample.at, used: own });
      byImage.set(key, entry);
    }
    const clusterIds = [...new Set([...byImage.values()].map((e) => e.clusterId))];
    const [workloads, clusters, billed] = await Promise.all([
      tx.workload.findMany({
        where: { id: { in: clusterIds } },
        select: { id: true, hostId: true, ownerAccountId: true },
      }),
      tx.cluster.findMany({ where: { id: { in: clusterIds } }, select: { id: true, ownerId: true } }),
      tx.usageRecord.findMany({
        where: { kind: 'storage', resourceType: 'snapshot' },
        select: { resourceId: true, endedAt: true },
        orderBy: { endedAt: 'desc' },
        distinct: ['resourceId'],
      }),
    ]);
    const workloadOf = new Map(workloads.map((w) => [w.id.toLowerCase(), w]));
    const ownerOf = new Map(clusters.map((c) => [c.id.toLowerCase(), c.ownerId]));
    const billedUntil = new Map(billed.map((r) => [r.resourceId, r.endedAt]));
    const records = [];
    for (const [key, entry] of byImage) {
      const workload = workloadOf.get(entry.clusterId);
      if (
        !workload ||
        workload.hostId !== entry.hostId ||
        workload.ownerAccountId.toLowerCase() !== entry.accountId
      ) {
        continue;
      }
      const imageId = key.slice(key.indexOf(' ') + 1);
      const since = billedUntil.get(imageId) ?? new Date(now.getTime() - FIRST_LOOKBACK_MS);
      const { gbHours, start, peak } = heldGbHours(entry.list, since, now);
      if (!start || gbHours <= 0) continue;
      records.push({
        id: newId('use'),
        accountId: workload.ownerAccountId,
        userId: ownerOf.get(entry.clusterId) ?? null,
        resourceType: 'snapshot',
        resourceId: imageId,
        kind: 'storage',
        quantity: gbHours,
        unit: 'GB-hours',
        cost: gbHours * this.#o.pricePerGbHour,
        startedAt: start,
        endedAt: now,
        metadata: { source: 'snapshot', clusterId: workload.id, hostId: entry.hostId, peakBytes: peak },
      });
    }
    return records;
  }
}

interface Held {
  at: Date;
  used: number;
}

/**
 * Each sample's bytes held until the next sample, at most SAMPLE_VALID_MS (a host that stops reporting
 * stops being billed), counted from `since` (the resource's last record) to `now`.
 */
function heldGbHours(list: Held[], since: Date, now: Date) {
  let gbHours = 0;
  let start: Date | null = null;
  let peak = 0;
  for (const [i, sample] of list.entries()) {
    const next = list[i + 1]?.at.getTime() ?? now.getTime();
    const held = Math.min(next, sample.at.getTime() + SAMPLE_VALID_MS, now.getTime());
    const begin = Math.max(sample.at.getTime(), since.getTime());
    if (held <= begin) continue;
    gbHours += (sample.used / 1e9) * ((held - begin) / HOUR_MS);
    peak = Math.max(peak, sample.used);
    if (!start || begin < start.getTime()) start = new Date(begin);
  }
  return { gbHours, start, peak };
}

/** `anvil-snapshots/<account>/<cluster>` → its account and cluster (lower case, as the repository has them). */
function repositoryOwner(repository: unknown): { accountId: string; clusterId: string } | null {
  if (typeof repository !== 'string') return null;
  const match = /^anvil-snapshots\/([^/]+)\/([^/:]+)$/.exec(repository.toLowerCase());
  return match ? { accountId: match[1] as string, clusterId: match[2] as string } : null;
}

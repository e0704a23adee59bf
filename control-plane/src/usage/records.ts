import { sessionCost } from '../billing/sessions.ts';
import type { Database } from '../db/index.ts';

/**
 * The billed quantities of an account over a time range: closed sessions and other usage from
 * usage_records (contract 6), plus each open cluster session (the cluster's sessionStartedAt until now,
 * at its hourlyRate). Reports and alerts are computed from these only.
 */

export interface UsageItem {
  id: string;
  resourceType: string;
  resourceId: string;
  kind: string;
  userId: string | null;
  gpuType: string | null;
  gpuCount: number;
  quantity: number;
  unit: string;
  gpuHours: number;
  cost: number;
  startedAt: Date;
  endedAt: Date;
  metadata: Record<string, unknown> | null;
  /** An open cluster session, measured up to now. */
  open: boolean;
}

export interface ResourceInfo {
  name: string;
  region: string | null;
  ownerId: string | null;
}

/** Share of an item that falls in [from, to): by time for items with a duration, else by its end instant. */
export function shareIn(item: UsageItem, from: Date, to: Date, inclusiveEnd = false): number {
  const start = item.startedAt.getTime();
  const end = item.endedAt.getTime();
  const a = from.getTime();
  const b = to.getTime();
  if (end <= start) return end >= a && (end < b || (inclusiveEnd && end === b)) ? 1 : 0;
  const overlap = Math.min(end, b) - Math.max(start, a);
  return overlap <= 0 ? 0 : overlap / (end - start);
}

export class UsageRecords {
  constructor(private readonly db: Database) {}

  /** Items of the account touching [from, to], open sessions measured up to `now`. */
  async load(accountId: string, from: Date, to: Date, now: Date): Promise<UsageItem[]> {
    const [closed, open] = await Promise.all([
      this.db.prisma.usageRecord.findMany({
        where: { accountId, endedAt: { gte: from }, startedAt: { lte: to } },
        orderBy: { startedAt: 'asc' },
      }),
      this.db.prisma.cluster.findMany({
        where: { accountId, sessionStartedAt: { not: null, lte: to } },
        select: {
          id: true,
          ownerId: true,
          gpuType: true,
          gpuCount: true,
          hourlyRate: true,
          sessionStartedAt: true,
        },
      }),
    ]);
    const items: UsageItem[] = closed.map((r) => ({
      id: r.id,
      resourceType: r.resourceType,
      resourceId: r.resourceId,
      kind: r.kind,
      userId: r.userId,
      gpuType: r.gpuType,
      gpuCount: r.gpuCount,
      quantity: r.quantity,
      unit: r.unit,
      gpuHours: r.gpuHours,
      cost: r.cost,
      startedAt: r.startedAt,
      endedAt: r.endedAt,
      metadata: (r.metadata ?? null) as Record<string, unknown> | null,
      open: false,
    }));
    for (const c of open) {
      const startedAt = c.sessionStartedAt!;
      const hours = Math.max(0, now.getTime() - startedAt.getTime()) / 3_600_000;
      items.push({
        id: `open:${c.id}`,
        resourceType: 'cluster',
        resourceId: c.id,
        kind: 'gpu_compute',
        userId: c.ownerId,
        gpuType: c.gpuType,
        gpuCount: c.gpuCount,
        quantity: hours,
        unit: 'hours',
        gpuHours: hours * c.gpuCount,
        cost: sessionCost(c.hourlyRate, now.getTime() - startedAt.getTime()),
        startedAt,
        endedAt: now,
        metadata: null,
        open: true,
      });
    }
    return items;
  }

  /** Names, regions and owners of the clusters among the items (other resource types: metadata.name). */
  async resources(accountId: string, items: UsageItem[]): Promise<Map<string, ResourceInfo>> {
    const clusterIds = [
      ...new Set(items.filter((i) => i.resourceType === 'cluster').map((i) => i.resourceId)),
    ];
    const out = new Map<string, ResourceInfo>();
    if (clusterIds.length > 0) {
      const rows = await this.db.prisma.cluster.findMany({
        where: { accountId, id: { in: clusterIds } },
        select: { id: true, name: true, region: true, ownerId: true },
      });
      for (const row of rows) out.set(row.id, { name: row.name, region: row.region, ownerId: row.ownerId });
    }
    for (const item of items) {
      if (out.has(item.resourceId)) continue;
      const name = item.metadata?.['name'];
      const region = item.metadata?.['region'];
      out.set(item.resourceId, {
        name: typeof name === 'string' ? name : item.resourceId,
        region: typeof region === 'string' ? region : null,
        ownerId: item.userId,
      });
    }
    return out;
  }

  /** API requests of the account in [from, to) (the request log's rollups). */
  async apiCalls(accountId: string, from: Date, to: Date): Promise<number> {
    const rows = await this.db.sql.query<{ n: string | null }>(
      'SELECT sum(request_count)::text AS n FROM api_requests WHERE account_id = $1 AND created_at >= $2 AND created_at < $3',
      [accountId, from, to],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /**
   * GPU telemetry of open sessions over [from, to) by GPU type, from the one-minute GPU rollups of the
   * GPUs each running cluster holds now (host inventory index → UUID). Closed sessions have none: their
   * GPUs are not recorded once released.
   */
  async gpuMetrics(
    accountId: string,
    items: UsageItem[],
    from: Date,
    to: Date,
  ): Promise<
    Map<
      string,
      { avgUtil: number | null; peakUtil: number | null; avgMemory: number | null; avgTemp: number | null }
    >
  > {
    const open = items.filter((i) => i.open && i.kind === 'gpu_compute');
    const out = new Map<
      string,
      { avgUtil: number | null; peakUtil: number | null; avgMemory: number | null; avgTemp: number | null }
    >();
    if (open.length === 0) return out;
    const clusters = await this.db.prisma.cluster.findMany({
      where: { accountId, id: { in: open.map((i) => i.resourceId) }, hostId: { not: null } },
      select: { id: true, hostId: true, gpuIndices: true, gpuType: true, sessionStartedAt: true },
    });
    const hosts = await this.db.prisma.host.findMany({
      where: { id: { in: clusters.map((c) => c.hostId!) } },
      select: { id: true, inventory: true },
    });
    const byType = new Map<
      string,
      { n: number; util: number; peak: number | null; mem: number; memN: number; temp: number; tempN: number }
    >();
    for (const cluster of clusters) {
      const devices =
        (
          (hosts.find((h) => h.id === cluster.hostId)?.inventory ?? null) as {
            gpus?: { devices?: { index: number; uuid: string }[] };
          } | null
        )?.gpus?.devices ?? [];
      const uuids = cluster.gpuIndices
        .map((index) => devices.find((d) => d.index === index)?.uuid)
        .filter((u): u is string => typeof u === 'string');
      if (uuids.length === 0) continue;
      const start =
        cluster.sessionStartedAt && cluster.sessionStartedAt > from ? cluster.sessionStartedAt : from;
      const rows = await this.db.sql.query<{
        n: number | null;
        util: number | null;
        peak: number | null;
        mem: number | null;
        mem_n: number | null;
        temp: number | null;
        temp_n: number | null;
      }>(
        `SELECT sum(samples) FILTER (WHERE data ? 'utilizationPercent')::float8 AS n,
                sum((data->'utilizationPercent'->>'avg')::float8 * samples)::float8 AS util,
                max((data->'utilizationPercent'->>'max')::float8)::float8 AS peak,
                sum(100 * (data->'memoryUsedBytes'->>'avg')::float8 / nullif((data->'memoryTotalBytes'->>'avg')::float8, 0) * samples)::float8 AS mem,
                sum(samples) FILTER (WHERE data ? 'memoryUsedBytes' AND data ? 'memoryTotalBytes')::float8 AS mem_n,
                sum((data->'temperatureC'->>'avg')::float8 * samples)::float8 AS temp,
                sum(samples) FILTER (WHERE data ? 'temperatureC')::float8 AS temp_n
           FROM metric_rollups
          WHERE host_id = $1 AND kind = 'gpu' AND series = ANY($2::text[]) AND bucket >= $3 AND bucket < $4`,
        [cluster.hostId, uuids, start, to],
      );
      const r = rows[0];
      if (!r?.n) continue;
      const acc = byType.get(cluster.gpuType) ?? {
        n: 0,
        util: 0,
        peak: null,
        mem: 0,
        memN: 0,
        temp: 0,
        tempN: 0,
      };
      acc.n += r.n;
      acc.util += r.util ?? 0;
      acc.peak = r.peak === null ? acc.peak : Math.max(acc.peak ?? 0, r.peak);
      acc.mem += r.mem ?? 0;
      acc.memN += r.mem_n ?? 0;
      acc.temp += r.temp ?? 0;
      acc.tempN += r.temp_n ?? 0;
      byType.set(cluster.gpuType, acc);
    }
    for (const [type, acc] of byType) {
      out.set(type, {
        avgUtil: acc.n > 0 ? acc.util / acc.n : null,
        peakUtil: acc.peak,
        avgMemory: acc.memN > 0 ? acc.mem / acc.memN : null,
        avgTemp: acc.tempN > 0 ? acc.temp / acc.tempN : null,
      });
    }
    return out;
  }
}

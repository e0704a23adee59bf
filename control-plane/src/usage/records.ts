import { sessionCost } from '../billing/ledger.ts';
import type { Database } from '../db/index.ts';

/**
 * The billed quantities of an account over a time range: closed sessions and other usage from
 * usage_records (contract 6), plus each open cluster session (the cluster's sessionStartedAt until now,
 * at its hourlyRate) and each open endpoint worker session (its billingStartedAt until now, at its
 * hourlyRate: billing/worker-sessions.ts). Reports and alerts are computed from these only.
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
  /** An open cluster or endpoint worker session, measured up to now. */
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
    const [closed, open, workers] = await Promise.all([
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
      this.db.prisma.endpointWorker.findMany({
        where: { accountId, billingStartedAt: { not: null, lte: to } },
        select: {
          id: true,
          endpointId: true,
          hostId: true,
          hourlyRate: true,
          billingStartedAt: true,
          endpoint: { select: { ownerId: true, name: true, gpuType: true, gpuCount: true } },
        },
      }),
    ]);
    const specs = await this.db.prisma.workload.findMany({
      where: { id: { in: workers.map((w) => w.id) } },
      select: { id: true, spec: true },
    });
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
    for (const w of workers) {
      const startedAt = w.billingStartedAt!;
      const ms = Math.max(0, now.getTime() - startedAt.getTime());
      const hours = ms / 3_600_000;
      const gpus =
        (specs.find((s) => s.id === w.id)?.spec as { gpus?: { uuid?: unknown }[] } | null)?.gpus ?? [];
      items.push({
        id: `open:${w.id}`,
        resourceType: 'endpoint',
        resourceId: w.endpointId,
        kind: 'gpu_compute',
        userId: w.endpoint.ownerId,
        gpuType: w.endpoint.gpuType,
        gpuCount: w.endpoint.gpuCount,
        quantity: hours,
        unit: 'hours',
        gpuHours: hours * w.endpoint.gpuCount,
        cost: sessionCost(w.hourlyRate, ms),
        startedAt,
        endedAt: now,
        metadata: {
          name: w.endpoint.name,
          worker_id: w.id,
          hourly_rate: w.hourlyRate,
          host_id: w.hostId,
          gpu_uuids: gpus.map((g) => g.uuid).filter((u): u is string => typeof u === 'string'),
        },
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
}

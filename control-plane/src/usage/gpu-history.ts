import { gpuUuidsAt } from '../billing/gpu-devices.ts';
import type { Database } from '../db/index.ts';
import type { UsageItem } from './records.ts';

/** GPU telemetry of a GPU type over a period; each figure null when no sample carried it. */
export interface GpuStats {
  avgUtil: number | null;
  peakUtil: number | null;
  avgMemory: number | null;
  avgTemp: number | null;
}

export interface GpuHistoryResult {
  byType: Map<string, GpuStats>;
  /** Average utilisation per GPU type and day (keyed by the day's start, ms); absent days had no sample. */
  dailyUtil: Map<string, Map<number, number>>;
}

/** The GPUs a session held (host and UUIDs) and when. */
interface GpuSpan {
  gpuType: string;
  hostId: string;
  uuids: string[];
  from: Date;
  to: Date;
}

interface Acc {
  n: number;
  util: number;
  peak: number | null;
  mem: number;
  memN: number;
  temp: number;
  tempN: number;
}

const empty = (): Acc => ({ n: 0, util: 0, peak: null, mem: 0, memN: 0, temp: 0, tempN: 0 });

/**
 * Per-GPU points of a span, from the one-minute rollups and, for minutes not rolled up yet, the raw
 * samples; summed per day (the latest of $5 at or before the point). Weights are sample counts.
 */
const SPAN_SQL = `
  WITH pts AS (
    SELECT bucket AS at, samples::float8 AS n,
           (data->'utilizationPercent'->>'avg')::float8 AS util,
           (data->'utilizationPercent'->>'max')::float8 AS peak,
           100 * (data->'memoryUsedBytes'->>'avg')::float8
               / nullif((data->'memoryTotalBytes'->>'avg')::float8, 0) AS mem,
           (data->'temperatureC'->>'avg')::float8 AS temp
      FROM metric_rollups
     WHERE host_id = $1 AND kind = 'gpu' AND series = ANY($2::text[]) AND bucket >= $3 AND bucket < $4
    UNION ALL
    SELECT s.at, 1::float8,
           (s.data->>'utilizationPercent')::float8,
           (s.data->>'utilizationPercent')::float8,
           100 * (s.data->>'memoryUsedBytes')::float8 / nullif((s.data->>'memoryTotalBytes')::float8, 0),
           (s.data->>'temperatureC')::float8
      FROM metric_samples s
     WHERE s.host_id = $1 AND s.kind = 'gpu' AND s.series = ANY($2::text[]) AND s.at >= $3 AND s.at < $4
       AND NOT EXISTS (SELECT 1 FROM metric_rollups r
                        WHERE r.host_id = s.host_id AND r.kind = 'gpu' AND r.series = s.series
                          AND r.bucket = date_trunc('minute', s.at))
  )
  SELECT (SELECT max(d) FROM unnest($5::timestamptz[]) AS d WHERE d <= pts.at) AS day,
         sum(n) FILTER (WHERE util IS NOT NULL)::float8 AS n,
         sum(util * n)::float8 AS util,
         max(peak)::float8 AS peak,
         sum(mem * n)::float8 AS mem,
         sum(n) FILTER (WHERE mem IS NOT NULL)::float8 AS mem_n,
         sum(temp * n)::float8 AS temp,
         sum(n) FILTER (WHERE temp IS NOT NULL)::float8 AS temp_n
    FROM pts GROUP BY 1`;

interface SpanRow {
  day: Date | string | null;
  n: number | null;
  util: number | null;
  peak: number | null;
  mem: number | null;
  mem_n: number | null;
  temp: number | null;
  temp_n: number | null;
}

/**
 * GPU utilisation, memory and temperature of an account's GPU sessions, from the telemetry store: the
 * samples of exactly the GPUs each session held, over the part of the session inside the period. A
 * closed session names its host and GPU UUIDs in its usage record (billing/sessions.ts,
 * billing/worker-sessions.ts); an open one is looked up from the cluster or worker holding the GPUs now.
 * Samples are kept as rollups for a month (fleet/telemetry/telemetry.ts): older periods answer null.
 */
export class GpuHistory {
  constructor(private readonly db: Database) {}

  async of(
    accountId: string,
    items: UsageItem[],
    from: Date,
    to: Date,
    dayStarts: Date[],
  ): Promise<GpuHistoryResult> {
    const byTypeAcc = new Map<string, Acc>();
    const daily = new Map<string, Map<number, { n: number; util: number }>>();
    for (const span of await this.#spans(accountId, items)) {
      const start = span.from > from ? span.from : from;
      const end = span.to < to ? span.to : to;
      if (end <= start || span.uuids.length === 0) continue;
      const rows = await this.db.sql.query<SpanRow>(SPAN_SQL, [
        span.hostId,
        span.uuids,
        start.toISOString(),
        end.toISOString(),
        dayStarts.map((d) => d.toISOString()),
      ]);
      for (const r of rows) {
        if (!r.n && !r.mem_n && !r.temp_n) continue;
        const acc = byTypeAcc.get(span.gpuType) ?? empty();
        byTypeAcc.set(span.gpuType, acc);
        acc.n += r.n ?? 0;
        acc.util += r.util ?? 0;
        acc.peak = r.peak === null ? acc.peak : Math.max(acc.peak ?? 0, r.peak);
        acc.mem += r.mem ?? 0;
        acc.memN += r.mem_n ?? 0;
        acc.temp += r.temp ?? 0;
        acc.tempN += r.temp_n ?? 0;
        if (r.day !== null && r.n) {
          const days = daily.get(span.gpuType) ?? new Map<number, { n: number; util: number }>();
          daily.set(span.gpuType, days);
          const key = new Date(r.day).getTime();
          const day = days.get(key) ?? { n: 0, util: 0 };
          day.n += r.n;
          day.util += r.util ?? 0;
          days.set(key, day);
        }
      }
    }
    const byType = new Map<string, GpuStats>();
    for (const [type, acc] of byTypeAcc) {
      byType.set(type, {
        avgUtil: acc.n > 0 ? acc.util / acc.n : null,
        peakUtil: acc.peak,
        avgMemory: acc.memN > 0 ? acc.mem / acc.memN : null,
        avgTemp: acc.tempN > 0 ? acc.temp / acc.tempN : null,
      });
    }
    const dailyUtil = new Map<string, Map<number, number>>();
    for (const [type, days] of daily) {
      dailyUtil.set(type, new Map([...days].map(([day, d]) => [day, d.util / d.n])));
    }
    return { byType, dailyUtil };
  }

  /** The GPUs of each GPU session among the items: closed ones from their record, open ones from now. */
  async #spans(accountId: string, items: UsageItem[]): Promise<GpuSpan[]> {
    const spans: GpuSpan[] = [];
    const openClusters = new Map<string, UsageItem>();
    for (const item of items) {
      if (item.kind !== 'gpu_compute' || !item.gpuType) continue;
      const hostId = item.metadata?.['host_id'];
      const uuids = item.metadata?.['gpu_uuids'];
      if (typeof hostId === 'string' && Array.isArray(uuids)) {
        spans.push({
          gpuType: item.gpuType,
          hostId,
          uuids: uuids.filter((u): u is string => typeof u === 'string'),
          from: item.startedAt,
          to: item.endedAt,
        });
      } else if (item.open && item.resourceType === 'cluster') {
        openClusters.set(item.resourceId, item);
      }
    }
    if (openClusters.size === 0) return spans;
    const clusters = await this.db.prisma.cluster.findMany({
      where: { accountId, id: { in: [...openClusters.keys()] }, hostId: { not: null } },
      select: { id: true, hostId: true, gpuIndices: true },
    });
    const hosts = await this.db.prisma.host.findMany({
      where: { id: { in: clusters.map((c) => c.hostId!) } },
      select: { id: true, inventory: true },
    });
    for (const cluster of clusters) {
      const item = openClusters.get(cluster.id)!;
      const inventory = hosts.find((h) => h.id === cluster.hostId)?.inventory ?? null;
      spans.push({
        gpuType: item.gpuType!,
        hostId: cluster.hostId!,
        uuids: gpuUuidsAt(inventory, cluster.gpuIndices),
        from: item.startedAt,
        to: item.endedAt,
      });
    }
    return spans;
  }
}

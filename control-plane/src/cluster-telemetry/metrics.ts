import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Cluster } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { TelemetryRetention } from '../fleet/telemetry/telemetry.ts';
import {
  CUSTOM_PREFIX,
  METRIC_NAMES_HELP,
  type MetricCategory,
  type MetricDefinition,
  selectMetrics,
} from './catalogue.ts';
import { type ClusterGpu, clusterGpus, findGpu } from './gpus.ts';
import { listParam, ParamErrors } from './params.ts';

/** Samples older than this are not "current": a cluster whose agent went quiet shows nulls, not old values. */
export const FRESHNESS_MS = 5 * 60_000;
export const HISTORY_INTERVALS = {
  '1m': 60_000,
  '5m': 300_000,
  '15m': 900_000,
  '1h': 3_600_000,
  '6h': 21_600_000,
  '1d': 86_400_000,
} as const;
export type HistoryInterval = keyof typeof HISTORY_INTERVALS;
export const AGGREGATIONS = ['avg', 'min', 'max', 'sum'] as const;
export type Aggregation = (typeof AGGREGATIONS)[number];
export const WINDOWS = {
  '5m': 300_000,
  '15m': 900_000,
  '1h': 3_600_000,
  '6h': 21_600_000,
  '24h': 86_400_000,
  '7d': 604_800_000,
  '30d': 2_592_000_000,
} as const;
export type Window = keyof typeof WINDOWS;
/** Most data points one historical query may produce per metric and GPU (range / interval). */
export const MAX_HISTORY_POINTS = 1_440;
/** Ranges up to this long inside raw retention are read from raw samples; others from minute rollups. */
export const RAW_RANGE_LIMIT_MS = 6 * 3_600_000;
export const METRICS_VERSION = '1';

type Json = Record<string, unknown>;
const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const obj = <T>(v: unknown): T => (typeof v === 'string' ? JSON.parse(v) : v) as T;
const round = (v: number | null, digits = 3): number | null =>
  v === null || !Number.isFinite(v) ? null : Math.round(v * 10 ** digits) / 10 ** digits;

interface LatestRow {
  kind: string;
  series: string;
  at: Date | string;
  data: unknown;
  info: unknown;
}

export interface SnapshotQuery {
  metrics?: string | string[] | undefined;
  gpu_id?: string | undefined;
  include_processes?: boolean | undefined;
  include_temperature?: boolean | undefined;
  include_power?: boolean | undefined;
  include_custom?: boolean | undefined;
}

export interface HistoryQuery {
  start_time?: string | undefined;
  end_time?: string | undefined;
  interval?: string | undefined;
  aggregation?: string | undefined;
  metrics?: string | string[] | undefined;
  gpu_id?: string | undefined;
}

export interface AggregateQuery {
  window?: string | undefined;
  start_time?: string | undefined;
  end_time?: string | undefined;
  metrics?: string | string[] | undefined;
  gpu_id?: string | undefined;
}

export interface CustomMetricInput {
  name: string;
  description?: string | undefined;
  type?: 'gauge' | 'counter' | undefined;
  unit?: string | undefined;
  tags?: string[] | undefined;
  value: number;
  timestamp?: string | undefined;
}

interface StatRow {
  kind: string;
  series: string;
  key: string;
  b?: string | number;
  n: string | number;
  avg: number | string | null;
  min: number | string | null;
  max: number | string | null;
  sum?: number | string | null;
  p50?: number | string | null;
  p95?: number | string | null;
  last?: number | string | null;
}

/** The series and keys a selection needs, and how to name what comes back. */
interface Plan {
  hostId: string | null;
  cluster: Cluster;
  gpus: ClusterGpu[];
  defs: MetricDefinition[];
  custom: string[] | null;
}

/**
 * Cluster metrics: the snapshot from the latest agent samples, history and summary statistics from
 * stored samples or their minute rollups, and custom metrics the cluster reports itself.
 */
export class ClusterMetricsService {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      retention: TelemetryRetention;
    },
  ) {}

  get #sql() {
    return this.deps.db.sql;
  }

  /** 400 METRICS_NOT_AVAILABLE unless the cluster is running (spec: Errors). */
  requireRunning(cluster: Cluster): void {
    if (cluster.status === 'running') return;
    throw new ApiError('METRICS_NOT_AVAILABLE', `cluster ${cluster.id} is ${cluster.status}, not running`, {
      cluster_status: cluster.status,
      reason: 'metrics are collected only while the cluster is running',
      suggestion:
        cluster.status === 'stopped'
          ? 'start the cluster, or read past values from /metrics/historical'
          : 'wait until the cluster is running, or read past values from /metrics/historical',
    });
  }

  /** Where the cluster's container series live: its placement, else the host its workload last ran on. */
  async #hostOf(cluster: Cluster): Promise<string | null> {
    if (cluster.hostId) return cluster.hostId;
    const workload = await this.deps.db.prisma.workload.findUnique({
      where: { id: cluster.id },
      select: { hostId: true },
    });
    return workload?.hostId ?? null;
  }

  async #latest(
    cluster: Cluster,
    gpus: ClusterGpu[],
  ): Promise<{ container: LatestRow[]; host: LatestRow | null; gpu: Map<string, LatestRow> }> {
    const hostId = cluster.hostId;
    if (!hostId) return { container: [], host: null, gpu: new Map() };
    const since = new Date(this.deps.clock.now().getTime() - FRESHNESS_MS).toISOString();
    const uuids = gpus.map((g) => g.uuid).filter((u): u is string => u !== null);
    const [container, others] = await Promise.all([
      // Two container samples: the rates (disk IO) are the difference of their counters.
      this.#sql.query<LatestRow>(
        `SELECT kind, series, at, data, info FROM metric_samples
         WHERE host_id = $1 AND kind = 'container' AND series = $2 AND at >= $3 ORDER BY at DESC LIMIT 2`,
        [hostId, cluster.id, since],
      ),
      this.#sql.query<LatestRow>(
        `SELECT DISTINCT ON (kind, series) kind, series, at, data, info FROM metric_samples
         WHERE host_id = $1 AND at >= $2
           AND ((kind = 'host' AND series = '') OR (kind = 'gpu' AND series = ANY($3::text[])))
         ORDER BY kind, series, at DESC`,
        [hostId, since, pgTextArray(uuids)],
      ),
    ]);
    const gpu = new Map<string, LatestRow>();
    let host: LatestRow | null = null;
    for (const row of others) {
      if (row.kind === 'host') host = row;
      else gpu.set(row.series, row);
    }
    return { container, host, gpu };
  }

  async snapshot(cluster: Cluster, query: SnapshotQuery) {
    this.requireRunning(cluster);
    const started = performance.now();
    const errors = new ParamErrors();
    const { selection, unknown } = selectMetrics(listParam(query.metrics));
    if (unknown.length > 0)
      errors.add('metrics', `unknown metric(s) ${unknown.join(', ')}; use ${METRIC_NAMES_HELP}`);
    const allGpus = await clusterGpus(this.deps.db, cluster);
    let gpus = allGpus;
    if (query.gpu_id !== undefined) {
      const gpu = findGpu(allGpus, query.gpu_id);
      if (!gpu)
        errors.add(
          'gpu_id',
          `not a GPU of this cluster (${allGpus.map((g) => g.id).join(', ') || 'it has none'})`,
        );
      else gpus = [gpu];
    }
    errors.throwIfAny();
    const explicit = listParam(query.metrics).length > 0;
    const wants = (category: MetricCategory): boolean => {
      if (!explicit) return true;
      if (category === 'application') return selection.custom === null || selection.custom.length > 0;
      return selection.builtIn.some((d) => d.category === category);
    };

    const latest = await this.#latest(cluster, gpus);
    const [c0, c1] = latest.container;
    const cData = c0 ? obj<Record<string, number>>(c0.data) : {};
    const hData = latest.host ? obj<Record<string, number>>(latest.host.data) : {};
    const times = [c0?.at, latest.host?.at, ...[...latest.gpu.values()].map((r) => r.at)]
      .filter((t): t is Date | string => t !== undefined)
      .map((t) => new Date(t).getTime());

    const data: Json = {
      cluster_id: cluster.id,
      timestamp: times.length ? new Date(Math.max(...times)).toISOString() : null,
    };

    if (wants('gpu')) {
      const per = <T>(f: (d: Record<string, number>) => T) =>
        Object.fromEntries(
          gpus.map((g) => {
            const row = g.uuid ? latest.gpu.get(g.uuid) : undefined;
            return [g.id, f(row ? obj<Record<string, number>>(row.data) : {})];
          }),
        );
      const gpu: Json = {
        utilization: per((d) => d['utilizationPercent'] ?? null),
        memory: per((d) => {
          const used = d['memoryUsedBytes'] ?? null;
          const total = d['memoryTotalBytes'] ?? null;
          return {
            used,
            total,
            utilization_percent: used !== null && total ? round((used / total) * 100, 2) : null,
          };
        }),
      };
      if (query.include_temperature !== false) gpu['temperature'] = per((d) => d['temperatureC'] ?? null);
      if (query.include_power !== false) gpu['power'] = per((d) => d['powerWatts'] ?? null);
      gpu['clock_speeds'] = per((d) => ({
        graphics_clock: d['smClockMhz'] ?? null,
        memory_clock: d['memoryClockMhz'] ?? null,
      }));
      data['gpu'] = gpu;
    }

    if (wants('cpu')) {
      const load = [hData['load1'], hData['load5'], hData['load15']];
      data['cpu'] = {
        utilization: perCore(cData['cpuPercent'], cluster.cpuCores),
        load_avg: load.every((v) => typeof v === 'number') ? load : null,
        memory_used: cData['memoryUsedBytes'] ?? null,
        memory_total: cData['memoryLimitBytes'] ?? null,
        cores: cluster.cpuCores,
        threads: null,
      };
    }

    if (wants('storage')) {
      const rate = (key: string) => {
        if (!c0 || !c1) return null;
        const a = obj<Record<string, number>>(c1.data)[key];
        const b = cData[key];
        const seconds = (new Date(c0.at).getTime() - new Date(c1.at).getTime()) / 1000;
        // A counter that went down means the container restarted between the samples: no rate.
        if (a === undefined || b === undefined || seconds <= 0 || b < a) return null;
        return round((b - a) / seconds, 1);
      };
      // Measured by the agent (writable layer plus volume) against the workload's storage_gb.
      const used = typeof cData['diskUsedBytes'] === 'number' ? cData['diskUsedBytes'] : null;
      const total = typeof cData['diskLimitBytes'] === 'number' ? cData['diskLimitBytes'] : null;
      data['storage'] = {
        disk_used: used,
        disk_total: total,
        utilization_percent: used !== null && total ? round((used / total) * 100, 1) : null,
        io_stats: {
          read_bytes_per_sec: rate('blockReadBytes'),
          write_bytes_per_sec: rate('blockWriteBytes'),
          read_ops_per_sec: null,
          write_ops_per_sec: null,
        },
      };
    }

    if (wants('network')) {
      data['network'] = {
        bytes_sent: cData['networkTxBytes'] ?? null,
        bytes_received: cData['networkRxBytes'] ?? null,
        packets_sent: null,
        packets_received: null,
        interfaces: [],
      };
    }

    if (query.include_processes === true) {
      data['processes'] = gpus.flatMap((g) => {
        const row = g.uuid ? latest.gpu.get(g.uuid) : undefined;
        const info = row?.info
          ? obj<{ processes?: { pid: number; usedMemoryBytes: number | null }[] }>(row.info)
          : null;
        return (info?.processes ?? []).map((p) => ({
          pid: p.pid,
          name: null,
          command: null,
          cpu_percent: null,
          memory_bytes: null,
          gpu_memory_usage: p.usedMemoryBytes,
          gpu_utilization: null,
          user: null,
          runtime_seconds: null,
          gpu_id: g.id,
        }));
      });
    }

    if (query.include_custom !== false && wants('application')) {
      data['custom_metrics'] = await this.latestCustom(cluster.id, selection.custom);
    }

    return {
      data,
      meta: { collection_time_ms: round(performance.now() - started, 1), metrics_version: METRICS_VERSION },
    };
  }

  /** The latest value of each custom metric (optionally only the named ones). */
  async latestCustom(clusterId: string, names: string[] | null): Promise<Record<string, number>> {
    const rows = await this.#sql.query<{ name: string; value: number }>(
      `SELECT DISTINCT ON (name) name, value FROM cluster_custom_metrics
       WHERE cluster_id = $1 ORDER BY name, at DESC, id DESC`,
      [clusterId],
    );
    return Object.fromEntries(
      rows.filter((r) => names === null || names.includes(r.name)).map((r) => [r.name, Number(r.value)]),
    );
  }

  /** The cluster object's `metrics` (contract 3): current utilisation, null without fresh samples. */
  async current(cluster: Cluster): Promise<{
    gpu_utilization: number | null;
    memory_utilization: number | null;
    cpu_utilization: number | null;
  } | null> {
    if (cluster.status !== 'running' || !cluster.hostId) return null;
    const gpus = await clusterGpus(this.deps.db, cluster);
    const latest = await this.#latest(cluster, gpus);
    const c = latest.container[0] ? obj<Record<string, number>>(latest.container[0].data) : null;
    const utils = [...latest.gpu.values()]
      .map((r) => obj<Record<string, number>>(r.data)['utilizationPercent'])
      .filter((v): v is number => typeof v === 'number');
    if (!c && utils.length === 0) return null;
    const used = c?.['memoryUsedBytes'];
    const limit = c?.['memoryLimitBytes'];
    return {
      gpu_utilization: utils.length ? round(utils.reduce((a, b) => a + b, 0) / utils.length, 2) : null,
      memory_utilization: used !== undefined && limit ? round((used / limit) * 100, 2) : null,
      cpu_utilization: round(perCore(c?.['cpuPercent'], cluster.cpuCores), 2),
    };
  }

  // ---- history and statistics

  async #plan(
    cluster: Cluster,
    errors: ParamErrors,
    metrics: string | string[] | undefined,
    gpuId: string | undefined,
  ): Promise<Plan> {
    const { selection, unknown } = selectMetrics(listParam(metrics));
    if (unknown.length > 0)
      errors.add('metrics', `unknown metric(s) ${unknown.join(', ')}; use ${METRIC_NAMES_HELP}`);
    let gpus = await clusterGpus(this.deps.db, cluster);
    if (gpuId !== undefined) {
      const gpu = findGpu(gpus, gpuId);
      if (!gpu)
        errors.add(
          'gpu_id',
          `not a GPU of this cluster (${gpus.map((g) => g.id).join(', ') || 'it has none'})`,
        );
      gpus = gpu ? [gpu] : [];
    }
    return {
      hostId: await this.#hostOf(cluster),
      cluster,
      gpus,
      defs: selection.builtIn,
      custom: selection.custom,
    };
  }

  /** Raw samples when the range lies in raw retention and spans at most RAW_RANGE_LIMIT_MS; else rollups. */
  #resolution(start: Date, end: Date): 'raw' | 'rollup' {
    const rawFrom = this.deps.clock.now().getTime() - this.deps.retention.rawMetricsMs;
    return start.getTime() >= rawFrom && end.getTime() - start.getTime() <= RAW_RANGE_LIMIT_MS
      ? 'raw'
      : 'rollup';
  }

  /** SQL condition on (kind, series) for the plan's series, with its parameters appended to `params`. */
  #seriesCondition(plan: Plan, params: unknown[], alias: string): string | null {
    const conds: string[] = [];
    const sources = new Set(plan.defs.map((d) => d.source));
    if (sources.has('container')) {
      params.push(plan.cluster.id);
      conds.push(`(${alias}.kind = 'container' AND ${alias}.series = $${params.length})`);
    }
    if (sources.has('host')) conds.push(`(${alias}.kind = 'host' AND ${alias}.series = '')`);
    const uuids = plan.gpus.map((g) => g.uuid).filter((u): u is string => u !== null);
    if (sources.has('gpu') && uuids.length > 0) {
      const marks = uuids.map((u) => {
        params.push(u);
        return `$${params.length}`;
      });
      conds.push(`(${alias}.kind = 'gpu' AND ${alias}.series IN (${marks.join(', ')}))`);
    }
    return conds.length ? `(${conds.join(' OR ')})` : null;
  }

  #keysCondition(plan: Plan, params: unknown[]): string {
    const keys = [...new Set(plan.defs.map((d) => d.key).filter((k): k is string => k !== null))];
    if (keys.length === 0) return 'FALSE';
    return `e.key IN (${keys
      .map((k) => {
        params.push(k);
        return `$${params.length}`;
      })
      .join(', ')})`;
  }

  /** Names a stat row: the metric definitions it feeds and the GPU id when per GPU. */
  #namesOf(plan: Plan, row: StatRow): { def: MetricDefinition; gpuId: string | null }[] {
    const gpuId = row.kind === 'gpu' ? (plan.gpus.find((g) => g.uuid === row.series)?.id ?? null) : null;
    return plan.defs.filter((d) => d.source === row.kind && d.key === row.key).map((def) => ({ def, gpuId }));
  }

  async historical(cluster: Cluster, query: HistoryQuery) {
    const errors = new ParamErrors();
    const start = errors.time('start_time', query.start_time, true);
    const end = errors.time('end_time', query.end_time, true);
    errors.order(start, end);
    const interval = errors.oneOf(
      'interval',
      query.interval,
      Object.keys(HISTORY_INTERVALS) as HistoryInterval[],
      '5m',
    );
    const aggregation = errors.oneOf('aggregation', query.aggregation, AGGREGATIONS, 'avg');
    const plan = await this.#plan(cluster, errors, query.metrics, query.gpu_id);
    const intervalMs = HISTORY_INTERVALS[interval];
    if (start && end && end > start) {
      const points = Math.ceil((end.getTime() - start.getTime()) / intervalMs);
      if (points > MAX_HISTORY_POINTS) {
        errors.add(
          'interval',
          `the range holds ${points} intervals of ${interval}; at most ${MAX_HISTORY_POINTS}: choose a longer interval or a shorter range`,
        );
      }
    }
    errors.throwIfAny();
    const from = start!;
    const to = end!;
    const resolution = this.#resolution(from, to);
    const rows = await this.#bucketStats(plan, from, to, intervalMs, resolution);
    const points: {
      timestamp: string;
      metric: string;
      gpu_id: string | null;
      value: number | null;
      samples: number;
    }[] = [];
    for (const row of rows) {
      for (const { def, gpuId } of this.#namesOf(plan, row)) {
        const raw = num(row[aggregation]);
        points.push({
          timestamp: new Date(Number(row.b) * intervalMs).toISOString(),
          metric: def.name,
          gpu_id: gpuId,
          value: round(def.perCore ? perCore(raw, cluster.cpuCores) : raw, 6),
          samples: Number(row.n),
        });
      }
    }
    for (const row of await this.#customBuckets(cluster.id, plan.custom, from, to, intervalMs)) {
      points.push({
        timestamp: new Date(Number(row.b) * intervalMs).toISOString(),
        metric: `${CUSTOM_PREFIX}${row.key}`,
        gpu_id: null,
        value: round(num(row[aggregation]), 6),
        samples: Number(row.n),
      });
    }
    points.sort((a, b) =>
      a.timestamp < b.timestamp
        ? -1
        : a.timestamp > b.timestamp
          ? 1
          : a.metric.localeCompare(b.metric) || (a.gpu_id ?? '').localeCompare(b.gpu_id ?? ''),
    );
    return {
      cluster_id: cluster.id,
      start_time: from.toISOString(),
      end_time: to.toISOString(),
      interval,
      aggregation,
      resolution,
      metrics: [...plan.defs.map((d) => d.name), ...(plan.custom ?? []).map((n) => `${CUSTOM_PREFIX}${n}`)],
      data_points: points,
    };
  }

  async #bucketStats(
    plan: Plan,
    from: Date,
    to: Date,
    intervalMs: number,
    resolution: 'raw' | 'rollup',
  ): Promise<StatRow[]> {
    if (!plan.hostId) return [];
    const params: unknown[] = [plan.hostId, from.toISOString(), to.toISOString(), intervalMs];
    const series = this.#seriesCondition(plan, params, 's');
    if (!series) return [];
    const keys = this.#keysCondition(plan, params);
    if (resolution === 'raw') {
      return this.#sql.query<StatRow>(
        `SELECT s.kind, s.series, e.key, floor(extract(epoch FROM s.at) * 1000 / $4::float8)::bigint AS b,
                count(*)::int AS n, avg(x.v)::float8 AS avg, min(x.v)::float8 AS min, max(x.v)::float8 AS max,
                sum(x.v)::float8 AS sum
         FROM metric_samples s CROSS JOIN LATERAL jsonb_each(s.data) AS e
              CROSS JOIN LATERAL (SELECT (e.value #>> '{}')::float8 AS v) AS x
         WHERE s.host_id = $1 AND s.at >= $2 AND s.at < $3 AND ${series} AND ${keys}
         GROUP BY s.kind, s.series, e.key, b`,
        params,
      );
    }
    return this.#sql.query<StatRow>(
      `SELECT s.kind, s.series, e.key, floor(extract(epoch FROM s.bucket) * 1000 / $4::float8)::bigint AS b,
              sum(s.samples)::int AS n,
              (sum((e.value ->> 'avg')::float8 * s.samples) / nullif(sum(s.samples), 0))::float8 AS avg,
              min((e.value ->> 'min')::float8)::float8 AS min, max((e.value ->> 'max')::float8)::float8 AS max,
              sum((e.value ->> 'avg')::float8 * s.samples)::float8 AS sum
       FROM metric_rollups s CROSS JOIN LATERAL jsonb_each(s.data) AS e
       WHERE s.host_id = $1 AND s.bucket >= $2 AND s.bucket < $3 AND ${series} AND ${keys}
       GROUP BY s.kind, s.series, e.key, b`,
      params,
    );
  }

  async #customBuckets(
    clusterId: string,
    names: string[] | null,
    from: Date,
    to: Date,
    intervalMs: number,
  ): Promise<StatRow[]> {
    if (names !== null && names.length === 0) return [];
    return this.#sql.query<StatRow>(
      `SELECT 'custom' AS kind, '' AS series, name AS key, floor(extract(epoch FROM at) * 1000 / $4::float8)::bigint AS b,
              count(*)::int AS n, avg(value)::float8 AS avg, min(value)::float8 AS min, max(value)::float8 AS max,
              sum(value)::float8 AS sum
       FROM cluster_custom_metrics
       WHERE cluster_id = $1 AND at >= $2 AND at < $3 AND ($5::boolean OR name = ANY($6::text[]))
       GROUP BY name, b`,
      [clusterId, from.toISOString(), to.toISOString(), intervalMs, names === null, pgTextArray(names ?? [])],
    );
  }

  async aggregated(cluster: Cluster, query: AggregateQuery) {
    const errors = new ParamErrors();
    const now = this.deps.clock.now();
    let start = errors.time('start_time', query.start_time);
    let end = errors.time('end_time', query.end_time);
    const window = errors.oneOf('window', query.window, Object.keys(WINDOWS) as Window[], '1h');
    if (query.window !== undefined && query.start_time !== undefined) {
      errors.add('window', 'give either window or start_time/end_time, not both');
    }
    if (query.start_time === undefined) {
      end ??= now;
      start = new Date(end.getTime() - WINDOWS[window]);
    } else {
      end ??= now;
    }
    errors.order(start, end);
    const plan = await this.#plan(cluster, errors, query.metrics, query.gpu_id);
    errors.throwIfAny();
    const from = start!;
    const to = end!;
    const resolution = this.#resolution(from, to);
    const rows = await this.#summaryStats(plan, from, to, resolution);
    const results: Json[] = [];
    const scale = (def: MetricDefinition | null, v: unknown) =>
      round(def?.perCore ? perCore(num(v), cluster.cpuCores) : num(v), 6);
    for (const row of rows) {
      for (const { def, gpuId } of this.#namesOf(plan, row)) {
        results.push(statResult(def.name, gpuId, def.unit, row, (v) => scale(def, v)));
      }
    }
    // Requested names that are not measured per cluster, and GPUs without samples, still appear: null.
    for (const def of plan.defs) {
      const targets = def.source === 'gpu' ? plan.gpus.map((g) => g.id) : [null];
      for (const gpuId of targets) {
        if (!results.some((r) => r['metric'] === def.name && r['gpu_id'] === gpuId)) {
          results.push(statResult(def.name, gpuId, def.unit, null, () => null));
        }
      }
    }
    for (const row of await this.#customSummary(cluster.id, plan.custom, from, to)) {
      results.push(
        statResult(`${CUSTOM_PREFIX}${row.key}`, null, row.series || null, row, (v) => round(num(v), 6)),
      );
    }
    results.sort(
      (a, b) =>
        String(a['metric']).localeCompare(String(b['metric'])) ||
        String(a['gpu_id'] ?? '').localeCompare(String(b['gpu_id'] ?? '')),
    );
    return {
      cluster_id: cluster.id,
      window: query.start_time === undefined ? window : null,
      start_time: from.toISOString(),
      end_time: to.toISOString(),
      resolution,
      metrics: results,
    };
  }

  async #summaryStats(plan: Plan, from: Date, to: Date, resolution: 'raw' | 'rollup'): Promise<StatRow[]> {
    if (!plan.hostId) return [];
    const params: unknown[] = [plan.hostId, from.toISOString(), to.toISOString()];
    const series = this.#seriesCondition(plan, params, 's');
    if (!series) return [];
    const keys = this.#keysCondition(plan, params);
    if (resolution === 'raw') {
      return this.#sql.query<StatRow>(
        `SELECT s.kind, s.series, e.key, count(*)::int AS n, avg(x.v)::float8 AS avg, min(x.v)::float8 AS min,
                max(x.v)::float8 AS max,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY x.v)::float8 AS p50,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY x.v)::float8 AS p95,
                (array_agg(x.v ORDER BY s.at DESC, s.id DESC))[1]::float8 AS last
         FROM metric_samples s CROSS JOIN LATERAL jsonb_each(s.data) AS e
              CROSS JOIN LATERAL (SELECT (e.value #>> '{}')::float8 AS v) AS x
         WHERE s.host_id = $1 AND s.at >= $2 AND s.at < $3 AND ${series} AND ${keys}
         GROUP BY s.kind, s.series, e.key`,
        params,
      );
    }
    return this.#sql.query<StatRow>(
      `SELECT s.kind, s.series, e.key, sum(s.samples)::int AS n,
              (sum((e.value ->> 'avg')::float8 * s.samples) / nullif(sum(s.samples), 0))::float8 AS avg,
              min((e.value ->> 'min')::float8)::float8 AS min, max((e.value ->> 'max')::float8)::float8 AS max,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY (e.value ->> 'avg')::float8)::float8 AS p50,
              percentile_cont(0.95) WITHIN GROUP (ORDER BY (e.value ->> 'avg')::float8)::float8 AS p95,
              (array_agg((e.value ->> 'last')::float8 ORDER BY s.bucket DESC))[1]::float8 AS last
       FROM metric_rollups s CROSS JOIN LATERAL jsonb_each(s.data) AS e
       WHERE s.host_id = $1 AND s.bucket >= $2 AND s.bucket < $3 AND ${series} AND ${keys}
       GROUP BY s.kind, s.series, e.key`,
      params,
    );
  }

  async #customSummary(clusterId: string, names: string[] | null, from: Date, to: Date): Promise<StatRow[]> {
    if (names !== null && names.length === 0) return [];
    return this.#sql.query<StatRow>(
      `SELECT 'custom' AS kind, coalesce((array_agg(unit ORDER BY at DESC, id DESC) FILTER (WHERE unit IS NOT NULL))[1], '') AS series, name AS key,
              count(*)::int AS n, avg(value)::float8 AS avg, min(value)::float8 AS min, max(value)::float8 AS max,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY value)::float8 AS p50,
              percentile_cont(0.95) WITHIN GROUP (ORDER BY value)::float8 AS p95,
              (array_agg(value ORDER BY at DESC, id DESC))[1]::float8 AS last
       FROM cluster_custom_metrics
       WHERE cluster_id = $1 AND at >= $2 AND at < $3 AND ($4::boolean OR name = ANY($5::text[]))
       GROUP BY name`,
      [clusterId, from.toISOString(), to.toISOString(), names === null, pgTextArray(names ?? [])],
    );
  }

  // ---- custom metrics

  async recordCustom(cluster: Cluster, input: CustomMetricInput) {
    const errors = new ParamErrors();
    const now = this.deps.clock.now();
    const at = errors.time('timestamp', input.timestamp) ?? (input.timestamp === undefined ? now : undefined);
    if (at && at.getTime() > now.getTime() + 5 * 60_000)
      errors.add('timestamp', 'is more than 5 minutes in the future');
    if (at && at.getTime() < now.getTime() - this.deps.retention.rollupMs) {
      errors.add('timestamp', 'is older than metric retention');
    }
    errors.throwIfAny();
    const row = await this.deps.db.prisma.clusterCustomMetric.create({
      data: {
        clusterId: cluster.id,
        accountId: cluster.accountId,
        name: input.name,
        description: input.description ?? null,
        type: input.type ?? 'gauge',
        unit: input.unit ?? null,
        tags: input.tags ?? [],
        value: input.value,
        at: at!,
        receivedAt: now,
      },
    });
    return {
      id: `cmv_${row.id.toString()}`,
      cluster_id: cluster.id,
      name: row.name,
      description: row.description,
      type: row.type,
      unit: row.unit,
      tags: row.tags,
      value: row.value,
      timestamp: row.at.toISOString(),
      received_at: row.receivedAt.toISOString(),
    };
  }

  /** Deletes custom metric values older than metric rollups are kept; returns rows deleted. */
  async purge(): Promise<number> {
    const cutoff = new Date(this.deps.clock.now().getTime() - this.deps.retention.rollupMs).toISOString();
    const rows = await this.#sql.query<{ n: number }>(
      'WITH gone AS (DELETE FROM cluster_custom_metrics WHERE received_at < $1 RETURNING 1) SELECT count(*)::int AS n FROM gone',
      [cutoff],
    );
    return Number(rows[0]?.n ?? 0);
  }
}

function perCore(percentOfOneCore: number | null | undefined, cores: number): number | null {
  if (typeof percentOfOneCore !== 'number' || !(cores > 0)) return null;
  return percentOfOneCore / cores;
}

/** A PostgreSQL text[] literal, bound as one parameter (values quoted and escaped). */
function pgTextArray(values: string[]): string {
  return `{${values.map((v) => `"${v.replace(/["\\]/g, (c) => `\\${c}`)}"`).join(',')}}`;
}

function statResult(
  metric: string,
  gpuId: string | null,
  unit: string | null,
  row: StatRow | null,
  f: (v: unknown) => number | null,
): Json {
  return {
    metric,
    gpu_id: gpuId,
    unit,
    count: row ? Number(row.n) : 0,
    min: row ? f(row.min) : null,
    max: row ? f(row.max) : null,
    avg: row ? f(row.avg) : null,
    p50: row ? f(row.p50) : null,
    p95: row ? f(row.p95) : null,
    last: row ? f(row.last) : null,
  };
}

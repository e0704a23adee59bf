import type { LogEntry, LogLoss, LogsComplete, MetricSample } from '@anvil/shared/protocol';
import type { Clock } from '../../auth/clock.ts';
import { betweenStatements, deleteOlderThan } from '../../db/batching.ts';
import type { Database } from '../../db/index.ts';
import { soleProcess } from '../../db/index.ts';
import { cleanJson, cleanText } from '../agents/sanitize.ts';
import { BatchWriter } from './batch-writer.ts';
import { gpuHealthFigures } from './gpu-health-figures.ts';
import type { ControlPlaneMetrics } from './prometheus.ts';

/**
 * How long telemetry is kept. Raw samples serve the last day at full resolution (every metrics
 * interval, 15 s by default); one-minute rollups (avg, min, max, last of every value) serve a month.
 * Logs are kept a week. Retention counts from when the control plane received the data, so an agent
 * with a wrong clock cannot make its data vanish or linger.
 */
export interface TelemetryRetention {
  rawMetricsMs: number;
  rollupMs: number;
  logsMs: number;
}

export const DEFAULT_RETENTION: TelemetryRetention = {
  rawMetricsMs: 24 * 3_600_000,
  rollupMs: 30 * 86_400_000,
  logsMs: 7 * 86_400_000,
};

/** Longest log line kept; longer lines are cut (Docker splits lines at 16 KiB already). */
export const MAX_LOG_LINE_CHARS = 65_536;

/**
 * Rollups cover samples received up to this long ago: a row stamped at flush time is committed well
 * within it, so no sample slips between two rollup runs.
 */
const ROLLUP_LAG_MS = 10_000;

/** Hosts whose minute is rolled up per statement where statements run in the API's thread (PGlite). */
const ROLLUP_HOSTS_PER_STATEMENT = 250;

/** Rows deleted per statement by retention, so a large purge never holds long locks. */
const PURGE_CHUNK = 20_000;

/** `snapshot`: a snapshot image's bytes, for storage metering (usage/storage-meter.ts). */
export type MetricKind = 'host' | 'gpu' | 'container' | 'snapshot';

interface MetricRow {
  host_id: string;
  kind: MetricKind;
  series: string;
  at: string;
  data: Record<string, number>;
  info: Record<string, unknown> | null;
}

interface LogRow {
  host_id: string;
  workload_id: string;
  container_id: string;
  stream: string;
  ts: string;
  at: string;
  line: string;
}

/**
 * A container whose agent has sent all its lines (log_batch `complete`). It travels in the log writer's
 * queue behind those lines and is stored in the statement that stores the last of them or a later one,
 * so whoever reads the mark finds every line of that container already stored.
 */
interface LogEndRow {
  end: true;
  host_id: string;
  workload_id: string;
  container_id: string;
}

export interface TelemetryOptions {
  retention?: Partial<TelemetryRetention>;
  flushIntervalMs?: number;
  maxPendingRows?: number;
  /** How often rollups and retention run. */
  maintenanceIntervalMs?: number;
  /**
   * The least time between two retention purges: every maintenance round with other replicas, 10 min in
   * a sole process (PGlite), where each purge is statements in the API's thread and retention is counted
   * in days.
   */
  purgeIntervalMs?: number;
  onError?: (error: unknown, what: string) => void;
}

export interface MetricPoint {
  series: string;
  at: string;
  data: Record<string, number>;
  info: Record<string, unknown> | null;
}

export interface RollupPoint {
  series: string;
  bucket: string;
  samples: number;
  data: Record<string, { avg: number; min: number; max: number; last: number }>;
}

export interface LogLine {
  seq: number;
  workloadId: string;
  containerId: string;
  stream: 'stdout' | 'stderr';
  ts: string;
  line: string;
}

export interface LogLossRecord {
  workloadId: string | null;
  containerId: string | null;
  lines: number;
  bytes: number;
  firstTs: string | null;
  lastTs: string | null;
  receivedAt: string;
}

function put(data: Record<string, number>, key: string, value: number | null | undefined): void {
  if (typeof value === 'number' && Number.isFinite(value)) data[cleanText(key, 200)] = value;
}

/** One agent sample becomes one row per series: the host, each GPU, each container. */
export function metricRows(hostId: string, sample: MetricSample): MetricRow[] {
  const at = new Date(sample.at).toISOString();
  const rows: MetricRow[] = [];
  if (sample.host) {
    const h = sample.host;
    const data: Record<string, number> = {};
    put(data, 'cpuPercent', h.cpuPercent);
    put(data, 'load1', h.load1);
    put(data, 'load5', h.load5);
    put(data, 'load15', h.load15);
    put(data, 'memoryTotalBytes', h.memoryTotalBytes);
    put(data, 'memoryUsedBytes', h.memoryUsedBytes);
    put(data, 'memoryAvailableBytes', h.memoryAvailableBytes);
    for (const disk of h.disks) {
      put(data, `disk:${disk.mount}:sizeBytes`, disk.sizeBytes);
      put(data, `disk:${disk.mount}:usedBytes`, disk.usedBytes);
      put(data, `disk:${disk.mount}:availableBytes`, disk.availableBytes);
    }
    if (h.diskIo) {
      put(data, 'diskIo:readOps', h.diskIo.readOps);
      put(data, 'diskIo:writeOps', h.diskIo.writeOps);
      put(data, 'diskIo:readBytes', h.diskIo.readBytes);
      put(data, 'diskIo:writeBytes', h.diskIo.writeBytes);
    }
    for (const net of h.network) {
      const p = `net:${net.interface}`;
      put(data, `${p}:rxBytes`, net.rxBytes);
      put(data, `${p}:txBytes`, net.txBytes);
      put(data, `${p}:rxErrors`, net.rxErrors);
      put(data, `${p}:txErrors`, net.txErrors);
      put(data, `${p}:rxDropped`, net.rxDropped);
      put(data, `${p}:txDropped`, net.txDropped);
    }
    rows.push({ host_id: hostId, kind: 'host', series: '', at, data, info: null });
  }
  for (const gpu of sample.gpus) {
    const data: Record<string, number> = {};
    put(data, 'index', gpu.index);
    put(data, 'utilizationPercent', gpu.utilizationPercent);
    put(data, 'memoryUtilizationPercent', gpu.memoryUtilizationPercent);
    put(data, 'memoryUsedBytes', gpu.memoryUsedBytes);
    put(data, 'memoryTotalBytes', gpu.memoryTotalBytes);
    put(data, 'temperatureC', gpu.temperatureC);
    put(data, 'powerWatts', gpu.powerWatts);
    put(data, 'smClockMhz', gpu.smClockMhz);
    put(data, 'memoryClockMhz', gpu.memoryClockMhz);
    put(data, 'processCount', gpu.processes.length);
    for (const [key, value] of Object.entries(gpuHealthFigures(gpu.health))) put(data, key, value);
    const info = gpu.processes.length > 0 ? cleanJson({ processes: gpu.processes }) : null;
    rows.push({ host_id: hostId, kind: 'gpu', series: cleanText(gpu.uuid, 128), at, data, info });
  }
  for (const c of sample.containers) {
    const data: Record<string, number> = {};
    put(data, 'cpuPercent', c.cpuPercent);
    put(data, 'cpuTotalNs', c.cpuTotalNs);
    put(data, 'memoryUsedBytes', c.memoryUsedBytes);
    put(data, 'memoryLimitBytes', c.memoryLimitBytes);
    put(data, 'networkRxBytes', c.networkRxBytes);
    put(data, 'networkTxBytes', c.networkTxBytes);
    put(data, 'blockReadBytes', c.blockReadBytes);
    put(data, 'blockWriteBytes', c.blockWriteBytes);
    put(data, 'diskUsedBytes', c.diskUsedBytes ?? null);
    put(data, 'diskLimitBytes', c.diskLimitBytes ?? null);
    rows.push({
      host_id: hostId,
      kind: 'container',
      series: c.workloadId,
      at,
      data,
      info: { containerId: cleanText(c.containerId, 128) },
    });
  }
  for (const image of sample.snapshots ?? []) {
    const data: Record<string, number> = {};
    put(data, 'sizeBytes', image.sizeBytes);
    put(data, 'ownBytes', image.ownBytes);
    rows.push({
      host_id: hostId,
      kind: 'snapshot',
      series: cleanText(image.imageId, 200),
      at,
      data,
      info: {
        repository: cleanText(image.repository, 300),
        workloadId: image.workloadId === null ? null : cleanText(image.workloadId, 200),
      },
    });
  }
  return rows;
}

function logRow(hostId: string, entry: LogEntry, fallbackAt: Date): LogRow {
  const parsed = Date.parse(entry.ts);
  return {
    host_id: hostId,
    workload_id: entry.workloadId,
    container_id: cleanText(entry.containerId, 128),
    stream: entry.stream,
    ts: cleanText(entry.ts, 64),
    at: (Number.isNaN(parsed) ? fallbackAt : new Date(parsed)).toISOString(),
    line: cleanText(entry.line, MAX_LOG_LINE_CHARS),
  };
}

function json<T>(value: T | string): T {
  return typeof value === 'string' ? (JSON.parse(value) as T) : value;
}

/** Samples or rollups of one host and kind, optionally one series, in [from, to). */
export interface SeriesQuery {
  hostId: string;
  kind: MetricKind;
  series?: string | undefined;
  from: Date;
  to: Date;
  limit?: number | undefined;
}

/** Parameters $1..$6 of the series queries, in the order their SQL names them. */
function seriesQueryParams(query: SeriesQuery): unknown[] {
  return [
    query.hostId,
    query.kind,
    query.series ?? null,
    query.from.toISOString(),
    query.to.toISOString(),
    query.limit ?? 10_000,
  ];
}

/**
 * Metric and log storage: batched ingestion from agent connections, queries, one-minute rollups and
 * retention. Rollups and retention run on every replica but only one at a time (an advisory lock).
 */
export class TelemetryService {
  readonly retention: TelemetryRetention;
  readonly #metrics: BatchWriter<MetricRow>;
  readonly #logs: BatchWriter<LogRow | LogEndRow>;
  readonly #logEndListeners = new Set<(workloadIds: string[]) => void>();
  readonly #maintenanceIntervalMs: number;
  readonly #onError: (error: unknown, what: string) => void;
  #rolledUpTo: Date | null = null;
  /** received_at of the newest samples this process wrote. */
  #newestSampleAt = Number.NEGATIVE_INFINITY;
  readonly #purgeIntervalMs: number;
  #purgedAt = Number.NEGATIVE_INFINITY;
  #timer: NodeJS.Timeout | null = null;
  #maintenance: Promise<void> | null = null;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly counters: ControlPlaneMetrics,
    options: TelemetryOptions = {},
  ) {
    this.retention = { ...DEFAULT_RETENTION, ...options.retention };
    this.#maintenanceIntervalMs = options.maintenanceIntervalMs ?? 60_000;
    this.#purgeIntervalMs = options.purgeIntervalMs ?? (soleProcess(db) ? 600_000 : 0);
    this.#onError = options.onError ?? (() => {});
    const common = {
      flushIntervalMs: options.flushIntervalMs ?? 250,
      maxBatch: 5_000,
      maxPending: options.maxPendingRows ?? 200_000,
    };
    // Samples come every metricsSeconds (15 s) and are read as charts: one statement a second is fresh
    // enough, where every 250 ms (as log lines, which people follow live) made a fleet of idle hosts
    // cost several small INSERTs a second.
    const metricsFlushMs = options.flushIntervalMs ?? 1_000;
    this.#metrics = new BatchWriter<MetricRow>({
      ...common,
      flushIntervalMs: metricsFlushMs,
      write: (rows) => this.#writeMetrics(rows),
      onDropped: (n, reason) => counters.telemetryRowsDropped.inc({ table: 'metric_samples', reason }, n),
      onError: (error) => this.#onError(error, 'write metric samples'),
    });
    this.#logs = new BatchWriter<LogRow | LogEndRow>({
      ...common,
      write: (rows) => this.#writeLogs(rows),
      onDropped: (n, reason) => counters.telemetryRowsDropped.inc({ table: 'log_entries', reason }, n),
      onError: (error) => this.#onError(error, 'write log entries'),
    });
  }

  // ---- ingestion

  /** Queues a metric_batch's samples; returns the number of series points accepted. */
  ingestMetrics(hostId: string, samples: MetricSample[], droppedByAgent: number): number {
    if (droppedByAgent > 0) this.counters.metricSamplesDroppedByAgents.inc(droppedByAgent);
    const rows = samples.flatMap((sample) => metricRows(hostId, sample));
    const accepted = this.#metrics.add(rows);
    this.counters.metricSamplesIngested.inc(accepted);
    return accepted;
  }

  /** Queues a log_batch's lines, then its containers' ends; returns the number of lines accepted. */
  ingestLogs(hostId: string, entries: LogEntry[], complete: LogsComplete[] = []): number {
    const now = this.clock.now();
    const accepted = this.#logs.add(entries.map((entry) => logRow(hostId, entry, now)));
    this.counters.logLinesIngested.inc(accepted);
    this.#logs.add(
      complete.map((c) => ({
        end: true as const,
        host_id: hostId,
        workload_id: c.workloadId,
        container_id: cleanText(c.containerId, 128),
      })),
    );
    return accepted;
  }

  /**
   * Be told when containers' ends (every line stored: workloads.logs_complete_container_id) are stored,
   * with their workload ids; returns the unsubscribe.
   */
  onLogsComplete(listener: (workloadIds: string[]) => void): () => void {
    this.#logEndListeners.add(listener);
    return () => this.#logEndListeners.delete(listener);
  }

  /** Records what an agent had to drop (logs_dropped), so a reader sees the gap and its size. */
  async recordLogLosses(hostId: string, losses: LogLoss[]): Promise<void> {
    if (losses.length === 0) return;
    this.counters.logLinesDroppedByAgents.inc(losses.reduce((sum, l) => sum + l.lines, 0));
    const rows = losses.map((l) => ({
      host_id: hostId,
      workload_id: l.workloadId,
      container_id: l.containerId === null ? null : cleanText(l.containerId, 128),
      lines: l.lines,
      bytes: l.bytes,
      first_ts: l.firstTs === null ? null : cleanText(l.firstTs, 64),
      last_ts: l.lastTs === null ? null : cleanText(l.lastTs, 64),
    }));
    await this.db.sql.query(
      `INSERT INTO log_losses (host_id, workload_id, container_id, lines, bytes, first_ts, last_ts, received_at)
       SELECT x.host_id, x.workload_id, x.container_id, x.lines, x.bytes, x.first_ts, x.last_ts, $2
       FROM jsonb_to_recordset($1::jsonb) AS x(host_id text, workload_id text, container_id text, lines int,
            bytes bigint, first_ts text, last_ts text)`,
      [JSON.stringify(rows), this.clock.now().toISOString()],
    );
  }

  async #writeMetrics(rows: MetricRow[]): Promise<void> {
    const receivedAt = this.clock.now();
    await this.db.sql.query(
      `INSERT INTO metric_samples (host_id, kind, series, at, data, info, received_at)
       SELECT x.host_id, x.kind, x.series, x.at, x.data, x.info, $2
       FROM jsonb_to_recordset($1::jsonb) AS x(host_id text, kind text, series text, at timestamptz, data jsonb, info jsonb)`,
      [JSON.stringify(rows), receivedAt.toISOString()],
    );
    this.#newestSampleAt = Math.max(this.#newestSampleAt, receivedAt.getTime());
  }

  async #writeLogs(rows: (LogRow | LogEndRow)[]): Promise<void> {
    const lines = rows.filter((r): r is LogRow => !('end' in r));
    // The latest end per workload (one UPDATE row each); stored in the same statement as the lines.
    const ends = [
      ...new Map(rows.flatMap((r) => ('end' in r ? [[r.workload_id, r] as const] : []))).values(),
    ];
    // WITH ORDINALITY + ORDER BY: sequence numbers follow the order the agent sent the lines in.
    await this.db.sql.query(
      `WITH lines AS (
         INSERT INTO log_entries (host_id, workload_id, container_id, stream, ts, at, line, received_at)
         SELECT x.host_id, x.workload_id, x.container_id, x.stream, x.ts, x.at, x.line, $2
         FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                AS (host_id text, workload_id text, container_id text, stream text, ts text, at timestamptz, line text))
              WITH ORDINALITY AS x(host_id, workload_id, container_id, stream, ts, at, line, n)
         ORDER BY x.n)
       UPDATE workloads AS w SET logs_complete_container_id = e.container_id
       FROM jsonb_to_recordset($3::jsonb) AS e(host_id text, workload_id text, container_id text)
       WHERE w.id = e.workload_id AND w.host_id = e.host_id`,
      [JSON.stringify(lines), this.clock.now().toISOString(), JSON.stringify(ends)],
    );
    if (ends.length === 0) return;
    const workloadIds = ends.map((e) => e.workload_id);
    for (const listener of this.#logEndListeners) listener(workloadIds);
  }

  /** Writes everything queued (tests, shutdown). */
  async flush(): Promise<void> {
    await Promise.all([this.#metrics.flush(), this.#logs.flush()]);
  }

  get pendingRows(): number {
    return this.#metrics.pending + this.#logs.pending;
  }

  // ---- queries

  async queryMetrics(query: SeriesQuery): Promise<MetricPoint[]> {
    const rows = await this.db.sql.query<{ series: string; at: Date | string; data: unknown; info: unknown }>(
      `SELECT series, at, data, info FROM metric_samples
       WHERE host_id = $1 AND kind = $2 AND ($3::text IS NULL OR series = $3) AND at >= $4 AND at < $5
       ORDER BY at, series LIMIT $6`,
      seriesQueryParams(query),
    );
    return rows.map((r) => ({
      series: r.series,
      at: new Date(r.at).toISOString(),
      data: json<Record<string, number>>(r.data as Record<string, number>),
      info: r.info === null ? null : json<Record<string, unknown>>(r.info as Record<string, unknown>),
    }));
  }

  async queryRollups(query: SeriesQuery): Promise<RollupPoint[]> {
    const rows = await this.db.sql.query<{
      series: string;
      bucket: Date | string;
      samples: number;
      data: unknown;
    }>(
      `SELECT series, bucket, samples, data FROM metric_rollups
       WHERE host_id = $1 AND kind = $2 AND ($3::text IS NULL OR series = $3) AND bucket >= $4 AND bucket < $5
       ORDER BY bucket, series LIMIT $6`,
      seriesQueryParams(query),
    );
    return rows.map((r) => ({
      series: r.series,
      bucket: new Date(r.bucket).toISOString(),
      samples: Number(r.samples),
      data: json<RollupPoint['data']>(r.data as RollupPoint['data']),
    }));
  }

  /** Lines of a workload after sequence number `afterSeq`, oldest first. */
  async queryLogs(query: {
    workloadId: string;
    afterSeq?: number | undefined;
    limit?: number | undefined;
  }): Promise<LogLine[]> {
    const rows = await this.db.sql.query<{
      seq: string | number;
      workload_id: string;
      container_id: string;
      stream: 'stdout' | 'stderr';
      ts: string;
      line: string;
    }>(
      `SELECT seq, workload_id, container_id, stream, ts, line FROM log_entries
       WHERE workload_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
      [query.workloadId, query.afterSeq ?? 0, query.limit ?? 1000],
    );
    return rows.map((r) => ({
      seq: Number(r.seq),
      workloadId: r.workload_id,
      containerId: r.container_id,
      stream: r.stream,
      ts: r.ts,
      line: r.line,
    }));
  }

  async logLosses(workloadId: string): Promise<LogLossRecord[]> {
    const rows = await this.db.sql.query<{
      workload_id: string | null;
      container_id: string | null;
      lines: number;
      bytes: string | number;
      first_ts: string | null;
      last_ts: string | null;
      received_at: Date | string;
    }>(
      `SELECT workload_id, container_id, lines, bytes, first_ts, last_ts, received_at FROM log_losses
       WHERE workload_id = $1 ORDER BY id`,
      [workloadId],
    );
    return rows.map((r) => ({
      workloadId: r.workload_id,
      containerId: r.container_id,
      lines: Number(r.lines),
      bytes: Number(r.bytes),
      firstTs: r.first_ts,
      lastTs: r.last_ts,
      receivedAt: new Date(r.received_at).toISOString(),
    }));
  }

  // ---- rollups and retention

  /**
   * Recomputes the one-minute rollup of every (series, minute) that received samples since the last
   * run, from all raw samples of that minute, so late samples (an agent catching up after a
   * disconnect) correct their minute. Returns the number of rollup rows written.
   */
  async rollup(): Promise<number> {
    // In a sole process every sample is written here: none received since the last rollup's end, nothing
    // to roll up (with replicas, another one may have written some).
    if (soleProcess(this.db) && this.#rolledUpTo && this.#newestSampleAt < this.#rolledUpTo.getTime())
      return 0;
    return (await this.#exclusive(7_245_318_101, () => this.#rollup())) ?? 0;
  }

  async #rollup(): Promise<number> {
    const now = this.clock.now();
    const to = new Date(now.getTime() - ROLLUP_LAG_MS);
    let from = this.#rolledUpTo;
    if (!from) {
      const [last] = await this.db.sql.query<{ at: Date | string | null }>(
        'SELECT max(computed_at) AS at FROM metric_rollups',
      );
      from = last?.at ? new Date(last.at) : new Date(now.getTime() - this.retention.rawMetricsMs);
    }
    if (to <= from) return 0;
    const oldest = new Date(now.getTime() - this.retention.rollupMs);
    const window = [from.toISOString(), to.toISOString(), oldest.toISOString()];
    // On a database server, one statement. Where it runs in the API's thread (PGlite), a minute of a
    // large fleet's samples is rolled up a few hosts at a time, letting the event loop turn between
    // statements: in one, 5,000 hosts' minute held the thread 1.1 s (fleet-sim heartbeat p99 over 1 s).
    let chunks: (string[] | null)[] = [null];
    if (this.db.sql.inThread) {
      const hosts = await this.db.sql.query<{ host_id: string }>(
        `SELECT DISTINCT host_id FROM metric_samples
         WHERE received_at >= $1 AND received_at < $2 AND at >= $3 ORDER BY host_id`,
        window,
      );
      chunks = [];
      for (let i = 0; i < hosts.length; i += ROLLUP_HOSTS_PER_STATEMENT) {
        chunks.push(hosts.slice(i, i + ROLLUP_HOSTS_PER_STATEMENT).map((h) => h.host_id));
      }
    }
    let written = 0;
    for (const [i, hostIds] of chunks.entries()) {
      if (i > 0) await betweenStatements(this.db.sql);
      written += await this.#rollupHosts(window, hostIds);
    }
    this.#rolledUpTo = to;
    return written;
  }

  /** Rolls up the window's samples of these hosts (null: every host). */
  async #rollupHosts(window: string[], hostIds: string[] | null): Promise<number> {
    const rows = await this.db.sql.query<{ n: number }>(
      `WITH touched AS (
         SELECT DISTINCT host_id, kind, series, date_trunc('minute', at) AS bucket
         FROM metric_samples WHERE received_at >= $1 AND received_at < $2 AND at >= $3
           AND ($4::text[] IS NULL OR host_id = ANY($4::text[]))
       ),
       kv AS (
         SELECT t.host_id, t.kind, t.series, t.bucket, s.id, s.at, e.key, (e.value #>> '{}')::float8 AS v
         FROM touched t
         JOIN metric_samples s ON s.host_id = t.host_id AND s.kind = t.kind AND s.series = t.series
              AND s.at >= t.bucket AND s.at < t.bucket + interval '1 minute'
         CROSS JOIN LATERAL jsonb_each(s.data) AS e
         WHERE jsonb_typeof(e.value) = 'number'
       ),
       per_key AS (
         SELECT host_id, kind, series, bucket, key, count(DISTINCT id) AS n,
                jsonb_build_object('avg', avg(v), 'min', min(v), 'max', max(v),
                                   'last', (array_agg(v ORDER BY at DESC, id DESC))[1]) AS agg
         FROM kv GROUP BY host_id, kind, series, bucket, key
       ),
       written AS (
         INSERT INTO metric_rollups (host_id, kind, series, bucket, samples, data, computed_at)
         SELECT host_id, kind, series, bucket, max(n)::int, jsonb_object_agg(key, agg), $2
         FROM per_key GROUP BY host_id, kind, series, bucket
         ON CONFLICT (host_id, kind, series, bucket)
         DO UPDATE SET samples = EXCLUDED.samples, data = EXCLUDED.data, computed_at = EXCLUDED.computed_at
         RETURNING 1
       )
       SELECT count(*)::int AS n FROM written`,
      [...window, hostIds],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /** Deletes what is past retention; returns rows deleted per table. */
  async purge(): Promise<Record<'metricSamples' | 'metricRollups' | 'logEntries' | 'logLosses', number>> {
    const result = await this.#exclusive(7_245_318_102, async () => {
      const now = this.clock.now().getTime();
      const before = (ms: number) => new Date(now - ms).toISOString();
      return {
        metricSamples: await this.#purgeTable(
          'metric_samples',
          'id',
          'received_at',
          before(this.retention.rawMetricsMs),
        ),
        metricRollups: await this.#purgeRollups(before(this.retention.rollupMs)),
        logEntries: await this.#purgeTable(
          'log_entries',
          'seq',
          'received_at',
          before(this.retention.logsMs),
        ),
        logLosses: await this.#purgeTable('log_losses', 'id', 'received_at', before(this.retention.logsMs)),
      };
    });
    return result ?? { metricSamples: 0, metricRollups: 0, logEntries: 0, logLosses: 0 };
  }

  #purgeTable(table: string, key: string, column: string, cutoff: string): Promise<number> {
    return deleteOlderThan(this.db.sql, { table, key, column, cutoff, chunk: PURGE_CHUNK });
  }

  async #purgeRollups(cutoff: string): Promise<number> {
    const rows = await this.db.sql.query<{ n: number }>(
      'WITH gone AS (DELETE FROM metric_rollups WHERE bucket < $1 RETURNING 1) SELECT count(*)::int AS n FROM gone',
      [cutoff],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /** Runs `work` unless another process (or this one) holds the job's lock; then answers null. */
  async #exclusive<T>(lockId: number, work: () => Promise<T>): Promise<T | null> {
    // A sole process has no one to exclude (maintain() runs one round at a time).
    if (soleProcess(this.db)) return work();
    return this.db.session(async (sql) => {
      const [row] = await sql.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [
        lockId,
      ]);
      if (!row?.locked) return null;
      try {
        return await work();
      } finally {
        await sql.query('SELECT pg_advisory_unlock($1)', [lockId]);
      }
    });
  }

  /** One maintenance round: write what is queued, roll up, purge. */
  async maintain(): Promise<void> {
    this.#maintenance ??= (async () => {
      try {
        await this.flush();
        await this.rollup();
        const now = this.clock.now().getTime();
        if (now - this.#purgedAt >= this.#purgeIntervalMs) {
          this.#purgedAt = now;
          await this.purge();
        }
      } catch (error) {
        this.#onError(error, 'telemetry maintenance');
      } finally {
        this.#maintenance = null;
      }
    })();
    return this.#maintenance;
  }

  start(): void {
    this.#metrics.start();
    this.#logs.start();
    if (this.#timer) return;
    this.#timer = setInterval(() => void this.maintain(), this.#maintenanceIntervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#maintenance;
    await Promise.all([this.#metrics.stop(), this.#logs.stop()]);
  }
}

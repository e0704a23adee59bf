import { createHash } from 'node:crypto';
import type { Clock } from '../auth/clock.ts';
import { deleteOlderThan } from '../db/batching.ts';
import type { Sql } from '../db/index.ts';
import { RetainedTable } from '../db/retained-table.ts';
import type { BatchBuffer } from '../fleet/telemetry/batch-writer.ts';
import { type Logger, silentLogger } from '../logger.ts';

export interface AccessLogEntry {
  timestamp: string;
  client_ip: string;
  /** The user id behind the key or session; null for public (unauthenticated) traffic. */
  user: string | null;
  method: string;
  path: string;
  status_code: number;
  response_time_ms: number;
  user_agent: string | null;
}

/**
 * Access log entries the API shows per cluster (the newest), kept per cluster in the database and
 * buffered per cluster between flushes: the newest of all replicas are always among the newest of each.
 */
export const ACCESS_LOG_CAPACITY = 100;
/** No access log entry is kept longer than this. */
export const ACCESS_LOG_RETENTION_MS = 7 * 86_400_000;

/** The newest `capacity` items pushed, oldest first when drained. */
class Ring<T> {
  private items: T[] = [];
  private next = 0;

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.items.length;
  }

  push(item: T): void {
    if (this.items.length < this.capacity) {
      this.items.push(item);
      return;
    }
    this.items[this.next] = item;
    this.next = (this.next + 1) % this.capacity;
  }

  drain(): T[] {
    const ordered =
      this.next === 0 ? this.items : [...this.items.slice(this.next), ...this.items.slice(0, this.next)];
    this.items = [];
    this.next = 0;
    return ordered;
  }
}

interface PortUsage {
  requests: number;
  responseMs: number;
  lastAccessed: number;
  /** sha256 of visitors first seen by this process since the last flush. */
  visitors: Set<string>;
}

/** One row of a traffic batch: an access log entry of a cluster, or the summed usage of a mapping. */
type TrafficRow = { clusterId: string; entry: AccessLogEntry } | { portId: string; usage: PortUsage };

export interface TrafficRecorderOptions {
  sql: Sql;
  clock: Clock;
  /** Buffered traffic waits at most this long for its write. */
  flushIntervalMs?: number;
  /** How often entries past retention (age, or beyond ACCESS_LOG_CAPACITY per cluster) are deleted. */
  purgeIntervalMs?: number;
  /** Entries buffered across all clusters while the database cannot be written; beyond it new ones drop. */
  maxBufferedEntries?: number;
  /** Port mappings with buffered usage counts, likewise. */
  maxBufferedPorts?: number;
  logger?: Logger;
}

/** Rows per INSERT statement. */
const BATCH_ROWS = 1_000;

/**
 * What waits for the next write: per cluster a ring of its newest ACCESS_LOG_CAPACITY entries, per
 * mapping its summed usage. Drained as the clusters' entries (oldest first) then the mappings' usage,
 * sorted, so two processes updating the same mappings tend to lock them in the same order.
 */
class TrafficBuffer implements BatchBuffer<TrafficRow> {
  private logs = new Map<string, Ring<AccessLogEntry>>();
  private usage = new Map<string, PortUsage>();
  /** Entries in the rings. */
  private buffered = 0;
  dropped = 0;

  constructor(
    private readonly maxBufferedEntries: number,
    private readonly maxBufferedPorts: number,
  ) {}

  get size(): number {
    return this.buffered + this.usage.size;
  }

  log(clusterId: string, entry: AccessLogEntry): void {
    let ring = this.logs.get(clusterId);
    if (!ring) {
      ring = new Ring(ACCESS_LOG_CAPACITY);
      this.logs.set(clusterId, ring);
    }
    if (ring.size < ACCESS_LOG_CAPACITY) {
      if (this.buffered >= this.maxBufferedEntries) {
        this.dropped++;
        return;
      }
      this.buffered++;
    }
    ring.push(entry);
  }

  /** The usage of a mapping to add to; null when the bound of mappings is reached (the request drops). */
  usageOf(portId: string): PortUsage | null {
    let usage = this.usage.get(portId);
    if (!usage) {
      if (this.usage.size >= this.maxBufferedPorts) {
        this.dropped++;
        return null;
      }
      usage = { requests: 0, responseMs: 0, lastAccessed: 0, visitors: new Set() };
      this.usage.set(portId, usage);
    }
    return usage;
  }

  drain(): TrafficRow[] {
    const rows: TrafficRow[] = [];
    for (const [clusterId, ring] of this.logs)
      for (const entry of ring.drain()) rows.push({ clusterId, entry });
    const ports = [...this.usage].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [portId, usage] of ports) rows.push({ portId, usage });
    this.logs = new Map();
    this.usage = new Map();
    this.buffered = 0;
    return rows;
  }

  putBack(rows: TrafficRow[]): void {
    const byCluster = new Map<string, AccessLogEntry[]>();
    for (const row of rows) {
      if ('portId' in row) {
        this.putBackUsage(row.portId, row.usage);
        continue;
      }
      const list = byCluster.get(row.clusterId);
      if (list) list.push(row.entry);
      else byCluster.set(row.clusterId, [row.entry]);
    }
    // Unwritten entries (oldest first) go ahead of whatever was logged meanwhile, within the bounds.
    for (const [clusterId, older] of byCluster) {
      const newer = this.logs.get(clusterId)?.drain() ?? [];
      this.buffered -= newer.length;
      // The newest of both, as many as the cluster's ring and the overall bound allow.
      const room = Math.min(
        ACCESS_LOG_CAPACITY,
        Math.max(newer.length, this.maxBufferedEntries - this.buffered),
      );
      const kept = [...older, ...newer].slice(-room);
      this.dropped += older.length + newer.length - kept.length;
      const ring = new Ring<AccessLogEntry>(ACCESS_LOG_CAPACITY);
      for (const entry of kept) ring.push(entry);
      this.logs.set(clusterId, ring);
      this.buffered += kept.length;
    }
  }

  private putBackUsage(portId: string, counts: PortUsage): void {
    const current = this.usage.get(portId);
    if (!current) {
      if (this.usage.size >= this.maxBufferedPorts) this.dropped += counts.requests;
      else this.usage.set(portId, counts);
      return;
    }
    current.requests += counts.requests;
    current.responseMs += counts.responseMs;
    current.lastAccessed = Math.max(current.lastAccessed, counts.lastAccessed);
    for (const visitor of counts.visitors) current.visitors.add(visitor);
  }
}

/**
 * Real traffic through the proxy, written to the database in batches so every control-plane process
 * sees the traffic of all of them.
 *
 * Access logs (every request, forwarded or refused) are buffered per cluster in a ring of the newest
 * ACCESS_LOG_CAPACITY entries, so a flush writes at most that many per cluster whatever the request rate,
 * and what the API shows (the newest ACCESS_LOG_CAPACITY of a cluster) is always among them. The table keeps the newest
 * ACCESS_LOG_CAPACITY per cluster and nothing older than ACCESS_LOG_RETENTION_MS (purged on a timer).
 * Usage counters of forwarded requests (count, summed response time, last access) and the visitors seen
 * are summed per mapping and added to its row. The BatchWriter writes them `flushIntervalMs` (1 s) after
 * the first request that waits, before the API reads, and at shutdown, each batch in one statement; what
 * a write fails to store is kept (within the buffer bounds) for the next.
 */
export class TrafficRecorder {
  private readonly buffer: TrafficBuffer;
  private readonly table: RetainedTable<TrafficRow>;
  /** Visitors known to be stored, per mapping (`port\nvisitor`), so their hash is computed once. */
  private readonly knownVisitors = new Set<string>();
  /** Clusters written since the last purge: the only ones whose count can exceed the capacity. */
  private trimNext = new Set<string>();
  private readonly sql: Sql;
  private readonly clock: Clock;

  constructor(options: TrafficRecorderOptions) {
    this.sql = options.sql;
    this.clock = options.clock;
    this.buffer = new TrafficBuffer(options.maxBufferedEntries ?? 50_000, options.maxBufferedPorts ?? 10_000);
    // The rings bound what a flush writes per cluster.
    this.table = new RetainedTable<TrafficRow>({
      buffer: this.buffer,
      write: (rows) => this.write(rows),
      flushIntervalMs: options.flushIntervalMs ?? 1_000,
      maxBatch: BATCH_ROWS,
      purge: () => this.purge(),
      purgeIntervalMs: options.purgeIntervalMs ?? 60_000,
      logger: options.logger ?? silentLogger,
      messages: {
        write: 'proxy traffic could not be written; will retry',
        purge: 'old proxy access log entries could not be purged',
      },
    });
  }

  start(): void {
    this.table.start();
  }

  /** Stops the timers and writes what is still buffered. */
  stop(): Promise<void> {
    return this.table.stop();
  }

  /** Entries dropped because the buffer was full (the database unreachable for long). */
  get droppedEntries(): number {
    return this.buffer.dropped;
  }

  /** Writes everything buffered so far (concurrent calls share runs); rejects when a write failed. */
  flush(): Promise<void> {
    return this.table.flushOrThrow();
  }

  log(clusterId: string, entry: AccessLogEntry): void {
    this.buffer.log(clusterId, entry);
    this.table.queued();
  }

  /** A request forwarded to the container through mapping `portId` and answered. */
  forwarded(portId: string, visitor: string, responseMs: number): void {
    const usage = this.buffer.usageOf(portId);
    if (!usage) return;
    usage.requests++;
    usage.responseMs += responseMs;
    usage.lastAccessed = this.clock.now().getTime();
    const known = `${portId}\n${visitor}`;
    if (!this.knownVisitors.has(known)) {
      usage.visitors.add(createHash('sha256').update(visitor).digest('hex'));
      if (this.knownVisitors.size >= 100_000) this.knownVisitors.clear();
      this.knownVisitors.add(known);
    }
    this.table.queued();
  }

  /** The newest `limit` entries of a cluster from every process, newest first (after this one's flush). */
  async accessLogs(clusterId: string, limit = ACCESS_LOG_CAPACITY): Promise<AccessLogEntry[]> {
    await this.flush();
    const rows = await this.sql.query<{
      at: Date | string;
      client_ip: string;
      user_id: string | null;
      method: string;
      path: string;
      status_code: number;
      response_time_ms: number;
      user_agent: string | null;
    }>(
      `SELECT at, client_ip, user_id, method, path, status_code, response_time_ms, user_agent
         FROM proxy_access_logs WHERE cluster_id = $1 ORDER BY at DESC, id DESC LIMIT $2`,
      [clusterId, limit],
    );
    return rows.map((row) => ({
      timestamp: new Date(row.at).toISOString(),
      client_ip: row.client_ip,
      user: row.user_id,
      method: row.method,
      path: row.path,
      status_code: row.status_code,
      response_time_ms: row.response_time_ms,
      user_agent: row.user_agent,
    }));
  }

  /**
   * One batch in one statement, so it is stored whole or not at all (and kept for the next write):
   * the entries, the mappings' counters and their new visitors.
   */
  private async write(rows: TrafficRow[]): Promise<void> {
    // PostgreSQL text cannot hold NUL; one such byte must not keep a whole batch out forever.
    const text = (value: string | null) => (value === null ? null : value.replaceAll('\u0000', '\uFFFD'));
    const logs: Record<string, unknown>[] = [];
    const ports: Record<string, unknown>[] = [];
    const visitors: { p: string; v: string }[] = [];
    const clusters = new Set<string>();
    for (const row of rows) {
      if ('portId' in row) {
        const u = row.usage;
        ports.push({
          id: row.portId,
          n: u.requests,
          d: u.responseMs,
          t: new Date(u.lastAccessed).toISOString(),
        });
        for (const v of u.visitors) visitors.push({ p: row.portId, v });
        continue;
      }
      const e = row.entry;
      clusters.add(row.clusterId);
      logs.push({
        c: row.clusterId,
        t: e.timestamp,
        i: text(e.client_ip),
        u: text(e.user),
        m: text(e.method),
        p: text(e.path),
        s: e.status_code,
        d: e.response_time_ms,
        a: text(e.user_agent),
      });
    }
    // Entries of a cluster deleted meanwhile (and visitors of a deleted mapping) are skipped, so they
    // cannot block the batch.
    await this.sql.query(
      `WITH logs AS (
         INSERT INTO proxy_access_logs (cluster_id, at, client_ip, user_id, method, path, status_code,
                                        response_time_ms, user_agent)
         SELECT x.c, x.t, x.i, x.u, x.m, x.p, x.s, x.d, x.a
           FROM json_to_recordset($1::json)
             AS x(c text, t timestamptz, i text, u text, m text, p text, s int, d float8, a text)
          WHERE EXISTS (SELECT 1 FROM clusters WHERE id = x.c)
       ), usage AS (
         UPDATE proxy_port_mappings m SET total_requests = m.total_requests + x.n,
           total_response_ms = m.total_response_ms + x.d,
           last_accessed = GREATEST(COALESCE(m.last_accessed, x.t), x.t)
           FROM json_to_recordset($2::json) AS x(id text, n int, d float8, t timestamptz)
          WHERE m.id = x.id
       ), visitors AS (
         INSERT INTO proxy_visitors (port_id, visitor)
         SELECT x.p, x.v FROM json_to_recordset($3::json) AS x(p text, v text)
          WHERE EXISTS (SELECT 1 FROM proxy_port_mappings WHERE id = x.p)
         ON CONFLICT DO NOTHING
       ) SELECT 1`,
      [JSON.stringify(logs), JSON.stringify(ports), JSON.stringify(visitors)],
    );
    for (const clusterId of clusters) this.trimNext.add(clusterId);
  }

  /**
   * Deletes entries past retention: older than ACCESS_LOG_RETENTION_MS, and beyond the newest
   * ACCESS_LOG_CAPACITY of the clusters this process wrote since the last purge. Rows another process is
   * deleting at the same moment are skipped (SKIP LOCKED) rather than waited for.
   */
  async purge(): Promise<number> {
    const clusters = [...this.trimNext];
    this.trimNext = new Set();
    let total = 0;
    try {
      if (clusters.length > 0) {
        const trimmed = await this.sql.query<{ n: number }>(
          `WITH ranked AS (
             SELECT id, row_number() OVER (PARTITION BY cluster_id ORDER BY at DESC, id DESC) AS n
               FROM proxy_access_logs WHERE cluster_id = ANY($1::text[])
           ), doomed AS (
             SELECT id FROM proxy_access_logs
              WHERE id IN (SELECT id FROM ranked WHERE n > $2) FOR UPDATE SKIP LOCKED
           ), gone AS (DELETE FROM proxy_access_logs WHERE id IN (SELECT id FROM doomed) RETURNING 1)
           SELECT count(*)::int AS n FROM gone`,
          [clusters, ACCESS_LOG_CAPACITY],
        );
        total += trimmed[0]?.n ?? 0;
      }
    } catch (error) {
      for (const clusterId of clusters) this.trimNext.add(clusterId);
      throw error;
    }
    const cutoff = new Date(this.clock.now().getTime() - ACCESS_LOG_RETENTION_MS).toISOString();
    const old = { table: 'proxy_access_logs', column: 'at', cutoff, skipLocked: true };
    return total + (await deleteOlderThan(this.sql, old));
  }
}

import type { Clock } from '../auth/clock.ts';
import { batchRowsFor, betweenStatements, deleteOlderThan } from '../db/batching.ts';
import type { Sql } from '../db/index.ts';
import { RetainedTable } from '../db/retained-table.ts';
import type { BatchBuffer } from '../fleet/telemetry/batch-writer.ts';
import { type Logger, silentLogger } from '../logger.ts';

/** One authenticated API request, as /v2/analytics/api-usage counts it. */
export interface RequestRecord {
  accountId: string;
  keyId: string | null;
  method: string;
  /** The route pattern (`/v2/auth/api-keys/:key_id`), never the concrete URL. */
  route: string;
  statusCode: number;
  durationMs: number;
  /** Unix ms. */
  at: number;
}

/**
 * Upper bounds (ms) of the duration histogram kept per rollup row; one more bucket holds the rest.
 * Percentiles are estimated from it the way Prometheus' histogram_quantile does.
 */
export const DURATION_BOUNDS_MS: readonly number[] = [
  0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];

export function durationBucket(ms: number): number {
  let i = 0;
  while (i < DURATION_BOUNDS_MS.length && ms > DURATION_BOUNDS_MS[i]!) i++;
  return i;
}

/**
 * The duration under which `q` of the requests of a histogram finished: found by linear interpolation
 * inside the bucket holding that rank, and never above the slowest request seen.
 */
export function estimateQuantile(buckets: readonly number[], q: number, maxMs: number): number {
  const total = buckets.reduce((sum, n) => sum + n, 0);
  if (total === 0) return 0;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < buckets.length; i++) {
    const n = buckets[i]!;
    if (n > 0 && below + n >= rank) {
      const lower = i === 0 ? 0 : DURATION_BOUNDS_MS[i - 1]!;
      const upper = Math.min(DURATION_BOUNDS_MS[i] ?? maxMs, maxMs);
      if (upper <= lower) return Math.min(lower, maxMs);
      return lower + ((upper - lower) * (rank - below)) / n;
    }
    below += n;
  }
  return maxMs;
}

interface Rollup {
  /** account, key, method, route, status and minute: what makes one row of api_requests. */
  key: string;
  accountId: string;
  keyId: string | null;
  method: string;
  route: string;
  statusCode: number;
  /** Unix ms of the minute's start. */
  minute: number;
  count: number;
  totalMs: number;
  maxMs: number;
  buckets: number[];
}

export interface RequestLogOptions {
  sql: Sql;
  clock: Clock;
  /**
   * Counted requests are written at least this often: every second on a database server (other replicas'
   * analytics see them soon), every 10 s on PGlite, where each write runs in the API's own thread and
   * analytics reads flush this process first anyway (issue 21: the 1 s upserts were a visible share of an
   * authenticated request's CPU at ordinary rates).
   */
  flushIntervalMs?: number;
  /** Rollup rows per statement on a database server (at most IN_THREAD_BATCH_ROWS on PGlite). */
  batchSize?: number;
  /** Rollups kept while the database cannot be written; beyond this, new ones are dropped. */
  maxRollups?: number;
  /** Rows older than this are deleted (the longest analytics period, 90 days, plus a day). */
  retentionMs?: number;
  purgeIntervalMs?: number;
  logger?: Logger;
}

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/**
 * Rollups waiting for their upsert, merged by row: a request of a row already waiting only adds to it.
 * Drained whole and sorted, so two processes upserting the same rows lock them in the same order.
 */
class Rollups implements BatchBuffer<Rollup> {
  private pending = new Map<string, Rollup>();
  dropped = 0;

  constructor(private readonly maxRollups: number) {}

  get size(): number {
    return this.pending.size;
  }

  record(entry: RequestRecord): void {
    const minute = entry.at - (entry.at % MINUTE_MS);
    const key = `${entry.accountId}\n${entry.keyId}\n${entry.method}\n${entry.route}\n${entry.statusCode}\n${minute}`;
    let rollup = this.pending.get(key);
    if (!rollup) {
      if (this.pending.size >= this.maxRollups) {
        this.dropped++;
        return;
      }
      rollup = {
        key,
        accountId: entry.accountId,
        keyId: entry.keyId,
        method: entry.method,
        route: entry.route,
        statusCode: entry.statusCode,
        minute,
        count: 0,
        totalMs: 0,
        maxMs: 0,
        buckets: new Array<number>(DURATION_BOUNDS_MS.length + 1).fill(0),
      };
      this.pending.set(key, rollup);
    }
    rollup.count++;
    rollup.totalMs += entry.durationMs;
    if (entry.durationMs > rollup.maxMs) rollup.maxMs = entry.durationMs;
    rollup.buckets[durationBucket(entry.durationMs)]!++;
  }

  drain(): Rollup[] {
    const taken = this.pending;
    this.pending = new Map();
    return [...taken.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** Returns unwritten counts, merging with whatever was counted meanwhile. */
  putBack(rollups: Rollup[]): void {
    for (const rollup of rollups) {
      const current = this.pending.get(rollup.key);
      if (!current) {
        if (this.pending.size >= this.maxRollups) this.dropped += rollup.count;
        else this.pending.set(rollup.key, rollup);
        continue;
      }
      current.count += rollup.count;
      current.totalMs += rollup.totalMs;
      current.maxMs = Math.max(current.maxMs, rollup.maxMs);
      rollup.buckets.forEach((n, i) => {
        current.buckets[i]! += n;
      });
    }
  }
}

/**
 * The request log behind API analytics. Recording a request adds it to an in-memory rollup (account, key,
 * method, route, status, minute); rollups are upserted into api_requests, one statement per batch, by the
 * BatchWriter: flushIntervalMs after the first request that waits (every second; every 10 s on PGlite),
 * before analytics reads (flush) and at shutdown. A row per request would cost ~10-20 µs of database work
 * per request (PGlite runs in the API's own thread), so requests are counted instead: the table stays
 * exact in counts, sums and maxima, per minute; percentiles come from the histogram. Requests of other
 * processes reach the table within their flush interval. What a write fails to store is kept (within
 * maxRollups) until the database answers.
 */
export class RequestLog {
  private readonly rollups: Rollups;
  private readonly table: RetainedTable<Rollup>;
  private readonly sql: Sql;
  private readonly clock: Clock;
  private readonly retentionMs: number;

  constructor(options: RequestLogOptions) {
    const sql = options.sql;
    this.sql = sql;
    this.clock = options.clock;
    this.rollups = new Rollups(options.maxRollups ?? 100_000);
    this.retentionMs = options.retentionMs ?? 91 * DAY_MS;
    // Rollups are few whatever the rate, and on PGlite each write costs the API.
    this.table = new RetainedTable<Rollup>({
      buffer: this.rollups,
      write: (batch) => this.upsert(batch),
      flushIntervalMs: options.flushIntervalMs ?? (sql.inThread ? 10_000 : 1_000),
      maxBatch: batchRowsFor(sql, options.batchSize ?? 500),
      betweenBatches: () => betweenStatements(sql),
      purge: () => this.purge(),
      purgeIntervalMs: options.purgeIntervalMs ?? 3_600_000,
      logger: options.logger ?? silentLogger,
      messages: {
        write: 'API request log could not be written; will retry',
        purge: 'old API request log rows could not be purged',
      },
    });
  }

  start(): void {
    this.table.start();
  }

  stop(): Promise<void> {
    return this.table.stop();
  }

  /** Counts one request; nothing is written here. */
  record(entry: RequestRecord): void {
    this.rollups.record(entry);
    this.table.queued();
  }

  /** Rollups waiting to be written. */
  get buffered(): number {
    return this.rollups.size;
  }

  /** Writes everything counted so far (concurrent calls share runs); rejects when a write failed. */
  flush(): Promise<void> {
    return this.table.flushOrThrow();
  }

  private async upsert(batch: Rollup[]): Promise<void> {
    const json = JSON.stringify(
      batch.map((r) => ({
        a: r.accountId,
        k: r.keyId,
        m: r.method,
        r: r.route,
        s: r.statusCode,
        t: new Date(r.minute).toISOString(),
        n: r.count,
        d: r.totalMs,
        x: r.maxMs,
        h: r.buckets,
      })),
    );
    // Rows of an account deleted meanwhile are skipped, so one of them cannot block the whole batch.
    await this.sql.query(
      `INSERT INTO api_requests AS q (account_id, key_id, method, route, status_code, created_at,
                                      request_count, duration_ms, duration_max_ms, duration_buckets)
       SELECT x.a, x.k, x.m, x.r, x.s, x.t, x.n, x.d, x.x, x.h
         FROM json_to_recordset($1::json)
           AS x(a text, k text, m text, r text, s int, t timestamptz, n int, d float8, x float8, h int[])
        WHERE EXISTS (SELECT 1 FROM accounts WHERE id = x.a)
       ON CONFLICT (account_id, key_id, method, route, status_code, created_at) DO UPDATE SET
         request_count = q.request_count + EXCLUDED.request_count,
         duration_ms = q.duration_ms + EXCLUDED.duration_ms,
         duration_max_ms = GREATEST(q.duration_max_ms, EXCLUDED.duration_max_ms),
         duration_buckets = ARRAY(
           SELECT COALESCE(old, 0) + COALESCE(new, 0)
             FROM unnest(q.duration_buckets, EXCLUDED.duration_buckets) WITH ORDINALITY AS u(old, new, i)
            ORDER BY i)`,
      [json],
    );
  }

  /** Deletes rows past retention, a bounded number per statement so no statement runs long. */
  async purge(): Promise<number> {
    const cutoff = new Date(this.clock.now().getTime() - this.retentionMs).toISOString();
    return deleteOlderThan(this.sql, { table: 'api_requests', column: 'created_at', cutoff });
  }
}

import { betweenStatements, IN_THREAD_BATCH_ROWS } from '../db/batching.ts';
import type { Sql } from '../db/index.ts';

/** One fixed-window counter: a bucket (what is counted) in the window starting at `windowStart`. */
export interface CounterRef {
  bucket: string;
  /** Unix milliseconds. */
  windowStart: number;
  /** Unix milliseconds; the row may be purged after this. */
  expiresAt: number;
}

export interface CounterDelta extends CounterRef {
  /** Requests admitted since the last sync (0 = just read the shared count). */
  delta: number;
}

export function counterKey(bucket: string, windowStart: number): string {
  return `${bucket}@${windowStart}`;
}

/**
 * Where the counters every control-plane process shares live. `add` is atomic per counter: it adds each
 * delta and returns the resulting totals (keyed by counterKey), which include every other process's
 * deltas added so far.
 */
export interface CounterStore {
  add(deltas: readonly CounterDelta[]): Promise<Map<string, number>>;
  read(refs: readonly CounterRef[]): Promise<Map<string, number>>;
  /** Deletes counters whose window ended before `nowMs`; returns how many. */
  purgeExpired(nowMs: number): Promise<number>;
  /** The most deltas one add() should carry (one statement's rows); absent: any number. */
  readonly maxBatch?: number;
  /** Awaited between two add() calls of one sync. */
  betweenBatches?(): Promise<void> | undefined;
  /** True when the store's statements run in this thread (PGlite): syncs are spaced further apart. */
  readonly inThread?: boolean;
}

interface CountRow {
  bucket: string;
  ws: number | string;
  count: number;
}

function toMap(rows: CountRow[]): Map<string, number> {
  return new Map(rows.map((row) => [counterKey(row.bucket, Number(row.ws)), Number(row.count)]));
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Counters in PostgreSQL's `rate_limit_counters` (PGlite or a server). One statement per sync whatever
 * the number of counters: deltas are upserted with `count = count + delta` (counters that only need
 * reading are selected in the same round trip). Rows are sorted by key so two processes syncing the same
 * counters lock them in the same order and cannot deadlock.
 */
export class SqlCounterStore implements CounterStore {
  /** Short statements on PGlite, which runs them in the API's thread (db/batching.ts). */
  readonly maxBatch: number | undefined;
  readonly inThread: boolean;

  constructor(private readonly sql: Sql) {
    this.inThread = sql.inThread === true;
    this.maxBatch = sql.inThread ? IN_THREAD_BATCH_ROWS : undefined;
  }

  betweenBatches(): Promise<void> | undefined {
    return betweenStatements(this.sql);
  }

  async add(deltas: readonly CounterDelta[]): Promise<Map<string, number>> {
    if (deltas.length === 0) return new Map();
    const sorted = [...deltas].sort((a, b) =>
      a.bucket === b.bucket ? a.windowStart - b.windowStart : a.bucket < b.bucket ? -1 : 1,
    );
    const rows = await this.sql.query<CountRow>(
      `WITH input AS (
         SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::timestamptz[])
           AS i(bucket, window_start, delta, expires_at)
       ), upserted AS (
         INSERT INTO rate_limit_counters AS c (bucket, window_start, count, expires_at)
         SELECT bucket, window_start, delta, expires_at FROM input WHERE delta > 0
         ON CONFLICT (bucket, window_start) DO UPDATE SET count = c.count + EXCLUDED.count
         RETURNING c.bucket, c.window_start, c.count
       )
       SELECT bucket, (extract(epoch FROM window_start) * 1000)::float8 AS ws, count FROM upserted
       UNION ALL
       SELECT c.bucket, (extract(epoch FROM c.window_start) * 1000)::float8 AS ws, c.count
         FROM rate_limit_counters c
         JOIN input i ON i.bucket = c.bucket AND i.window_start = c.window_start
        WHERE i.delta = 0`,
      [
        sorted.map((d) => d.bucket),
        sorted.map((d) => iso(d.windowStart)),
        sorted.map((d) => d.delta),
        sorted.map((d) => iso(d.expiresAt)),
      ],
    );
    return toMap(rows);
  }

  async read(refs: readonly CounterRef[]): Promise<Map<string, number>> {
    if (refs.length === 0) return new Map();
    const rows = await this.sql.query<CountRow>(
      `SELECT c.bucket, (extract(epoch FROM c.window_start) * 1000)::float8 AS ws, c.count
         FROM rate_limit_counters c
         JOIN unnest($1::text[], $2::timestamptz[]) AS i(bucket, window_start)
           ON i.bucket = c.bucket AND i.window_start = c.window_start`,
      [refs.map((r) => r.bucket), refs.map((r) => iso(r.windowStart))],
    );
    return toMap(rows);
  }

  async purgeExpired(nowMs: number): Promise<number> {
    const rows = await this.sql.query<{ n: number }>(
      'WITH gone AS (DELETE FROM rate_limit_counters WHERE expires_at < $1 RETURNING 1) SELECT count(*)::int AS n FROM gone',
      [iso(nowMs)],
    );
    return rows[0]?.n ?? 0;
  }
}

import { setImmediate as turn } from 'node:timers/promises';
import type { Sql } from './database.ts';

/**
 * Rows per statement for background writers (request log, rate-limit counters) when statements run in
 * this thread (PGlite). Measured under bench/auth-verify.ts with 100 busy accounts: a 100-row upsert
 * held the event loop for up to 19 ms, every second, and every request waiting then waited that long;
 * 32-row statements hold it for a few ms each, with requests served between them.
 */
export const IN_THREAD_BATCH_ROWS = 32;

/** How many rows one statement of a background writer may carry on this database. */
export function batchRowsFor(sql: Sql, serverRows: number): number {
  return sql.inThread ? Math.min(serverRows, IN_THREAD_BATCH_ROWS) : serverRows;
}

/**
 * Between two statements of one background write: on PGlite, lets the event loop serve what arrived
 * while the last one ran (a resolved query continues in a microtask, which would run the next statement
 * before any request). On a database server, nothing: the thread was free while the statement ran.
 */
export function betweenStatements(sql: Sql): Promise<void> | undefined {
  return sql.inThread ? turn() : undefined;
}

export interface DeleteOlderThan {
  table: string;
  /** The timestamp column compared with the cutoff. */
  column: string;
  /** ISO timestamp: rows whose column is before it go. */
  cutoff: string;
  /** The column a chunk is picked by (default id). */
  key?: string;
  /** Rows per statement, so a large purge never holds long locks (default 10 000). */
  chunk?: number;
  /** Passes over rows another process is deleting at the same moment instead of waiting for them. */
  skipLocked?: boolean;
}

/** Deletes what retention let go, a chunk per statement until a statement finds less; returns the rows deleted. */
export async function deleteOlderThan(sql: Sql, o: DeleteOlderThan): Promise<number> {
  const key = o.key ?? 'id';
  const chunk = o.chunk ?? 10_000;
  const lock = o.skipLocked ? ' FOR UPDATE SKIP LOCKED' : '';
  let total = 0;
  for (;;) {
    const rows = await sql.query<{ n: number }>(
      `WITH gone AS (
         DELETE FROM ${o.table}
          WHERE ${key} IN (SELECT ${key} FROM ${o.table} WHERE ${o.column} < $1 LIMIT ${chunk}${lock})
         RETURNING 1
       ) SELECT count(*)::int AS n FROM gone`,
      [o.cutoff],
    );
    const n = Number(rows[0]?.n ?? 0);
    total += n;
    if (n < chunk) return total;
  }
}

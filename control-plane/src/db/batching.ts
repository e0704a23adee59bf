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

import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { IN_THREAD_BATCH_ROWS, type Sql } from '../db/index.ts';
import { createTestDatabase, ManualClock, type TestDatabase } from '../testing/index.ts';
import {
  DURATION_BOUNDS_MS,
  durationBucket,
  estimateQuantile,
  RequestLog,
  type RequestRecord,
} from './request-log.ts';

const T = Date.parse('2026-05-01T10:00:00.000Z');

describe('RequestLog', () => {
  let database: TestDatabase;
  let accountId: string;
  const clock = new ManualClock(new Date(T));

  beforeEach(async () => {
    database = await createTestDatabase();
    accountId = newId('acc');
    await database.db.prisma.account.create({ data: { id: accountId, name: 'A' } });
  });
  afterEach(async () => database.drop());

  const record = (over: Partial<RequestRecord> = {}): RequestRecord => ({
    accountId,
    keyId: 'key_a',
    method: 'GET',
    route: '/v2/auth/verify',
    statusCode: 200,
    durationMs: 1.5,
    at: T,
    ...over,
  });
  const rows = () =>
    database.db.prisma.apiRequest.findMany({ orderBy: [{ createdAt: 'asc' }, { statusCode: 'asc' }] });

  /** A database that answers every statement with no rows, counting them. */
  function statementCounter(inThread: boolean) {
    const counted = {
      statements: 0,
      sql: {
        inThread,
        query: async <T>() => {
          counted.statements++;
          return [] as T[];
        },
        exec: async () => {},
      } as Sql,
    };
    return counted;
  }

  /** Counts the statements that reach the database. */
  function counting(sql: Sql) {
    const counted = { writes: 0, sql: { ...sql } as Sql };
    counted.sql.query = async (text, params) => {
      if (text.includes('INSERT INTO api_requests')) counted.writes++;
      return sql.query(text, params);
    };
    return counted;
  }

  it.each([
    [true, 10_000],
    [false, 1_000],
  ])('on a database in this thread (%s) writes on its own every %i ms', async (inThread, everyMs) => {
    // Statements on PGlite run in the API's thread: there the timer writes every 10 s, not every second.
    const counted = statementCounter(inThread);
    vi.useFakeTimers();
    const log = new RequestLog({ sql: counted.sql, clock });
    try {
      log.start();
      log.record(record());
      await vi.advanceTimersByTimeAsync(everyMs - 1);
      expect(counted.statements).toBe(0);
      await vi.advanceTimersByTimeAsync(1);
      expect(counted.statements).toBe(1);
    } finally {
      await log.stop();
      vi.useRealTimers();
    }
  });

  it('keeps no flush timer while nothing waits (only the hourly purge)', async () => {
    const counted = statementCounter(true);
    vi.useFakeTimers();
    const log = new RequestLog({ sql: counted.sql, clock });
    try {
      log.start();
      expect(vi.getTimerCount()).toBe(1);
      await vi.advanceTimersByTimeAsync(60_000);
      expect(counted.statements).toBe(0);
      log.record(record());
      expect(vi.getTimerCount()).toBe(2);
      await vi.advanceTimersByTimeAsync(10_000);
      expect(counted.statements).toBe(1);
      expect(vi.getTimerCount()).toBe(1);
    } finally {
      await log.stop();
      vi.useRealTimers();
    }
  });

  it('counts requests in memory and upserts one row per key, route, status and minute', async () => {
    const counted = counting(database.db.sql);
    const log = new RequestLog({ sql: counted.sql, clock });
    log.record(record({ durationMs: 0.05 }));
    log.record(record({ durationMs: 3, at: T + 59_999 }));
    log.record(record({ statusCode: 404, durationMs: 7 }));
    log.record(record({ at: T + 60_000, durationMs: 2 }));
    expect(counted.writes).toBe(0);
    expect(log.buffered).toBe(3);
    await log.flush();
    expect(counted.writes).toBe(1);
    // A later flush adds to the same minute's row rather than writing another.
    log.record(record({ durationMs: 40 }));
    await log.flush();

    const stored = await rows();
    expect(stored).toHaveLength(3);
    const [first, notFound, next] = stored;
    expect(first).toMatchObject({
      accountId,
      keyId: 'key_a',
      method: 'GET',
      route: '/v2/auth/verify',
      statusCode: 200,
      requestCount: 3,
      durationMs: 43.05,
      durationMaxMs: 40,
    });
    expect(first!.createdAt.toISOString()).toBe('2026-05-01T10:00:00.000Z');
    const histogram = new Array(DURATION_BOUNDS_MS.length + 1).fill(0);
    for (const ms of [0.05, 3, 40]) histogram[durationBucket(ms)]++;
    expect(first!.durationBuckets).toEqual(histogram);
    expect(notFound).toMatchObject({ statusCode: 404, requestCount: 1, durationMs: 7 });
    expect(next).toMatchObject({ requestCount: 1, durationMs: 2 });
    expect(next!.createdAt.toISOString()).toBe('2026-05-01T10:01:00.000Z');
  });

  it('merges the counts of several processes into the same rows', async () => {
    const a = new RequestLog({ sql: database.db.sql, clock });
    const b = new RequestLog({ sql: database.db.sql, clock });
    for (let i = 0; i < 5; i++) a.record(record());
    for (let i = 0; i < 7; i++) b.record(record());
    await Promise.all([a.flush(), b.flush()]);
    const stored = await rows();
    expect(stored.map((r) => r.requestCount)).toEqual([12]);
  });

  it('flushes at stop', async () => {
    const log = new RequestLog({ sql: database.db.sql, clock });
    log.start();
    log.record(record());
    log.record(record());
    await log.stop();
    expect((await rows()).map((r) => r.requestCount)).toEqual([2]);
  });

  it('keeps counts while the database fails, bounded, and writes them once it answers', async () => {
    let failing = true;
    const sql: Sql = {
      query: async (text, params) => {
        if (failing) throw new Error('database unreachable');
        return database.db.sql.query(text, params);
      },
      exec: (script) => database.db.sql.exec(script),
    };
    const log = new RequestLog({ sql, clock, maxRollups: 3 });
    for (let i = 0; i < 5; i++) log.record(record({ statusCode: 200 + i }));
    await expect(log.flush()).rejects.toThrow('database unreachable');
    log.record(record({ statusCode: 200 }));
    expect(log.buffered).toBe(3);
    failing = false;
    await log.flush();
    expect((await rows()).map((r) => [r.statusCode, r.requestCount])).toEqual([
      [200, 2],
      [201, 1],
      [202, 1],
    ]);
  });

  it('keeps each statement short on PGlite and lets the event loop turn between them', async () => {
    const counted = counting(database.db.sql);
    const order: string[] = [];
    const query = counted.sql.query;
    counted.sql.query = async (text, params) => {
      if (text.includes('INSERT INTO api_requests')) order.push('write');
      return query(text, params);
    };
    const log = new RequestLog({ sql: counted.sql, clock });
    for (let i = 0; i < 70; i++) log.record(record({ route: `/v2/route/${i}` }));
    setImmediate(() => order.push('turn'));
    await log.flush();
    expect((await rows()).reduce((sum, row) => sum + row.requestCount, 0)).toBe(70);
    if (database.db.kind === 'pglite') {
      // 70 rollups in statements of at most IN_THREAD_BATCH_ROWS (32), requests served in between.
      expect(counted.writes).toBe(Math.ceil(70 / IN_THREAD_BATCH_ROWS));
      expect(order.slice(0, 2)).toEqual(['write', 'turn']);
    } else {
      // A database server runs statements outside this thread: one statement carries them all.
      expect(counted.writes).toBe(1);
    }
  });

  it('skips rows of an account deleted meanwhile instead of failing the batch', async () => {
    const log = new RequestLog({ sql: database.db.sql, clock });
    log.record(record());
    log.record(record({ accountId: 'acc_gone' }));
    await log.flush();
    expect(await rows()).toHaveLength(1);
  });

  it('purges rows past retention', async () => {
    const log = new RequestLog({ sql: database.db.sql, clock, retentionMs: 86_400_000 });
    log.record(record({ at: T - 2 * 86_400_000 }));
    log.record(record({ at: T - 3_600_000 }));
    await log.flush();
    expect(await log.purge()).toBe(1);
    expect(await rows()).toHaveLength(1);
  });
});

describe('duration percentiles', () => {
  it('interpolates inside the bucket holding the rank and never exceeds the slowest request', () => {
    const buckets = new Array(DURATION_BOUNDS_MS.length + 1).fill(0);
    // 100 requests between 1 and 2 ms (bucket 4): p95 is 95% of the way through it.
    buckets[durationBucket(1.5)] = 100;
    expect(estimateQuantile(buckets, 0.95, 2)).toBeCloseTo(1.95, 5);
    expect(estimateQuantile(buckets, 0.5, 2)).toBeCloseTo(1.5, 5);
    // The slowest request seen narrows the bucket: 1 ms + 95% of (1.8 - 1) ms.
    expect(estimateQuantile(buckets, 0.95, 1.8)).toBeCloseTo(1.76, 5);
    buckets[durationBucket(70_000)] = 100;
    expect(estimateQuantile(buckets, 0.95, 90_000)).toBeLessThanOrEqual(90_000);
    expect(estimateQuantile([], 0.95, 0)).toBe(0);
  });
});

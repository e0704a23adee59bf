import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../testing/index.ts';
import { counterKey, SqlCounterStore } from './counter-store.ts';

const W = Date.parse('2026-05-01T10:00:00.000Z');
const HOUR = 3_600_000;

describe('SqlCounterStore', () => {
  let database: TestDatabase;
  let store: SqlCounterStore;

  beforeEach(async () => {
    database = await createTestDatabase();
    store = new SqlCounterStore(database.db.sql);
  });
  afterEach(async () => database.drop());

  const delta = (bucket: string, n: number, windowStart = W) => ({
    bucket,
    windowStart,
    expiresAt: windowStart + HOUR,
    delta: n,
  });

  it('adds deltas atomically and answers the totals, reading counters that get no delta', async () => {
    expect(await store.add([delta('a:read', 3), delta('a:write', 0)])).toEqual(
      new Map([[counterKey('a:read', W), 3]]),
    );
    const totals = await store.add([delta('a:read', 2), delta('a:write', 1), delta('a:read', 0, W + HOUR)]);
    expect(totals).toEqual(
      new Map([
        [counterKey('a:read', W), 5],
        [counterKey('a:write', W), 1],
      ]),
    );
    expect(await store.add([delta('a:read', 0)])).toEqual(new Map([[counterKey('a:read', W), 5]]));
    expect(await store.read([{ bucket: 'a:write', windowStart: W, expiresAt: W + HOUR }])).toEqual(
      new Map([[counterKey('a:write', W), 1]]),
    );
  });

  it('loses no increment when processes add to the same counters at once', async () => {
    const others = new SqlCounterStore(database.db.sql);
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? store : others).add([delta('b:read', 1), delta('b:write', 2), delta(`b:${i}`, 1)]),
      ),
    );
    const totals = await store.read([
      { bucket: 'b:read', windowStart: W, expiresAt: W + HOUR },
      { bucket: 'b:write', windowStart: W, expiresAt: W + HOUR },
    ]);
    expect([...totals.values()]).toEqual([20, 40]);
  });

  it('purges the counters of ended windows only', async () => {
    await store.add([delta('c:read', 1, W - HOUR), delta('c:read', 1, W)]);
    expect(await store.purgeExpired(W + 1)).toBe(1);
    const left = await database.db.prisma.rateLimitCounter.findMany();
    expect(left.map((r) => r.windowStart.getTime())).toEqual([W]);
  });
});

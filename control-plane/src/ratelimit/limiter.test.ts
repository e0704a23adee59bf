import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../testing/clock.ts';
import { type CounterDelta, type CounterRef, type CounterStore, counterKey } from './counter-store.ts';
import { type LimitCheck, SharedCounterLimiter, unconfirmedAllowance } from './limiter.ts';

/** The shared store in memory, with hooks to delay or fail writes as a slow or absent database would. */
class MemoryStore implements CounterStore {
  constructor(readonly inThread = false) {}
  readonly counts = new Map<string, number>();
  writes = 0;
  fail = false;
  gate: Promise<void> | null = null;

  async add(deltas: readonly CounterDelta[]) {
    if (this.gate) await this.gate;
    if (this.fail) throw new Error('database unreachable');
    this.writes++;
    const out = new Map<string, number>();
    for (const d of deltas) {
      const key = counterKey(d.bucket, d.windowStart);
      const next = (this.counts.get(key) ?? 0) + d.delta;
      if (d.delta > 0 || this.counts.has(key)) this.counts.set(key, next);
      if (this.counts.has(key)) out.set(key, next);
    }
    return out;
  }
  async read(refs: readonly CounterRef[]) {
    const out = new Map<string, number>();
    for (const r of refs) {
      const value = this.counts.get(counterKey(r.bucket, r.windowStart));
      if (value !== undefined) out.set(counterKey(r.bucket, r.windowStart), value);
    }
    return out;
  }
  purges = 0;
  async purgeExpired() {
    this.purges++;
    return 0;
  }
  total(check: LimitCheck, now: number) {
    return this.counts.get(counterKey(check.bucket, Math.floor(now / check.windowMs) * check.windowMs)) ?? 0;
  }
}

const HOUR = 3_600_000;
const check = (limit: number, bucket = 'acc:read'): LimitCheck => ({ bucket, windowMs: HOUR, limit });

function limiter(store: CounterStore, clock: ManualClock) {
  // No start(): no timers, so every sync in these tests is one the algorithm itself asked for.
  return new SharedCounterLimiter({ store, clock });
}

describe('SharedCounterLimiter', () => {
  it('is exact in one process, and a refused request counts nothing', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const l = limiter(store, clock);
    const results = [];
    for (let i = 0; i < 30; i++) results.push((await l.acquire([check(20)])).allowed);
    expect(results.filter(Boolean)).toHaveLength(20);
    expect(results.slice(20).every((ok) => !ok)).toBe(true);
    await l.sync();
    expect(store.total(check(20), clock.now().getTime())).toBe(20);
  });

  it('counts a request against every check or none of them', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const l = limiter(store, clock);
    const tier = check(100, 'acc:write');
    const endpoint = check(3, 'acc:POST /clusters');
    for (let i = 0; i < 3; i++) expect((await l.acquire([tier, endpoint])).allowed).toBe(true);
    const refused = await l.acquire([tier, endpoint]);
    expect(refused).toMatchObject({ allowed: false, refusedBy: 1 });
    expect((await l.acquire([tier])).allowed).toBe(true);
    await l.sync();
    const now = clock.now().getTime();
    expect(store.total(tier, now)).toBe(4);
    expect(store.total(endpoint, now)).toBe(3);
  });

  it('starts again in the next window', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:59:59Z'));
    const l = limiter(new MemoryStore(), clock);
    expect((await l.acquire([check(1)])).allowed).toBe(true);
    const refused = await l.acquire([check(1)]);
    expect(refused.allowed).toBe(false);
    expect(refused.resetsAt[0]).toBe(Date.parse('2026-05-01T11:00:00Z'));
    clock.advance(1_000);
    expect((await l.acquire([check(1)])).allowed).toBe(true);
  });

  it('lets priority requests use the 10% reserve, and only them', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const l = limiter(new MemoryStore(), clock);
    for (let i = 0; i < 50; i++) await l.acquire([check(50)]);
    expect((await l.acquire([check(50)])).allowed).toBe(false);
    const priority = [];
    for (let i = 0; i < 8; i++) priority.push((await l.acquire([check(50)], true)).allowed);
    expect(priority).toEqual([true, true, true, true, true, false, false, false]);
    expect((await l.acquire([check(50)])).allowed).toBe(false);
  });

  it.each([
    [2, 20],
    [3, 100],
    [4, 1_000],
    [5, 10_000],
  ])('%i processes sharing one store stay within N*A-1 of a limit of %i', async (processes, limit) => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const limiters = Array.from({ length: processes }, () => limiter(store, clock));
    // Every process sees its first request before any other process has synced, then they interleave
    // concurrently: the worst case for stale views.
    let admitted = 0;
    for (let round = 0; round < Math.ceil((limit * 1.2) / processes) + 5; round++) {
      const outcomes = await Promise.all(limiters.map((l) => l.acquire([check(limit)])));
      admitted += outcomes.filter((o) => o.allowed).length;
    }
    await Promise.all(limiters.map((l) => l.sync()));
    const bound = limit + processes * unconfirmedAllowance(limit) - 1;
    expect(admitted).toBeGreaterThanOrEqual(limit);
    expect(admitted).toBeLessThanOrEqual(bound);
    expect(store.total(check(limit), clock.now().getTime())).toBe(admitted);
  });

  it('syncs in batches, not per request, when far from the limit', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const l = limiter(store, clock);
    for (let i = 0; i < 1_000; i++) await l.acquire([check(100_000)]);
    // One sync for the first sight of the counter, then one per A = 1000 unconfirmed admissions.
    expect(store.writes).toBeLessThanOrEqual(2);
  });

  it('re-reads a counter it has not synced for 5 s before deciding', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const a = limiter(store, clock);
    const b = limiter(store, clock);
    expect((await a.acquire([check(1_000)])).counts[0]).toBe(1);
    for (let i = 0; i < 9; i++) await b.acquire([check(1_000)]);
    await b.sync();
    clock.advance(6_000);
    expect((await a.acquire([check(1_000)])).counts[0]).toBe(11);
  });

  it('keeps counting on its own while the store fails, and catches up afterwards', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const l = limiter(store, clock);
    store.fail = true;
    const results = [];
    for (let i = 0; i < 12; i++) results.push((await l.acquire([check(10)])).allowed);
    expect(results.filter(Boolean)).toHaveLength(10);
    store.fail = false;
    await l.sync();
    expect(store.total(check(10), clock.now().getTime())).toBe(10);
  });

  it('syncs in pieces the store can take, and a failed piece alone is counted again', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new (class extends MemoryStore {
      readonly maxBatch = 2;
      failOnWrite = -1;
      between = 0;
      override async add(deltas: readonly CounterDelta[]) {
        expect(deltas.length).toBeLessThanOrEqual(2);
        if (this.writes === this.failOnWrite) throw new Error('database unreachable');
        return super.add(deltas);
      }
      betweenBatches() {
        this.between++;
        return undefined;
      }
    })();
    const l = limiter(store, clock);
    const checks = ['a', 'b', 'c', 'd', 'e'].map((name) => check(100, `acc:${name}`));
    for (const c of checks) await l.acquire([c]);
    // Pieces {a,b}, {c,d}, {e}: the second fails after the first was written.
    store.failOnWrite = store.writes + 1;
    store.between = 0;
    await expect(l.sync()).rejects.toThrow('database unreachable');
    store.failOnWrite = -1;
    await l.sync();
    const now = clock.now().getTime();
    expect(checks.map((c) => store.total(c, now))).toEqual([1, 1, 1, 1, 1]);
    expect(store.between).toBeGreaterThanOrEqual(2);
  });

  it('answers usage from the store, including other processes', async () => {
    const clock = new ManualClock(new Date('2026-05-01T10:00:00Z'));
    const store = new MemoryStore();
    const a = limiter(store, clock);
    const b = limiter(store, clock);
    for (let i = 0; i < 4; i++) await a.acquire([check(1_000)]);
    for (let i = 0; i < 3; i++) await b.acquire([check(1_000)]);
    await b.sync();
    expect(await a.usage([check(1_000), check(5, 'acc:other')])).toEqual([7, 0]);
  });

  it.each([
    [true, 2_500],
    [false, 1_000],
  ])('with statements in this thread (%s) syncs on its own every %i ms', async (inThread, everyMs) => {
    // On PGlite each sync runs in the API's thread: the timer spaces them further apart there.
    vi.useFakeTimers();
    const store = new MemoryStore(inThread);
    const clock = new ManualClock(new Date('2026-05-01T10:00:00.000Z'));
    const limiter = new SharedCounterLimiter({ store, clock });
    const check: LimitCheck = { bucket: 'acc_t:read', windowMs: 3_600_000, limit: 10_000 };
    try {
      await limiter.start();
      await limiter.acquire([check]);
      const written = store.writes;
      expect(limiter.tryAcquire([check], false, clock.now().getTime())?.allowed).toBe(true);
      await vi.advanceTimersByTimeAsync(everyMs - 1);
      expect(store.writes).toBe(written);
      await vi.advanceTimersByTimeAsync(1);
      expect(store.writes).toBe(written + 1);
    } finally {
      await limiter.stop();
      vi.useRealTimers();
    }
  });

  it.each([
    [true, 600_000],
    [false, 60_000],
  ])('with statements in this thread (%s) purges expired counters every %i ms', async (inThread, everyMs) => {
    // Expired rows are never read; on PGlite each DELETE runs in the API's thread, so it comes seldom there.
    vi.useFakeTimers();
    const store = new MemoryStore(inThread);
    const clock = new ManualClock(new Date('2026-05-01T10:00:00.000Z'));
    const limiter = new SharedCounterLimiter({ store, clock });
    try {
      await limiter.start();
      expect(store.purges).toBe(1);
      await vi.advanceTimersByTimeAsync(everyMs - 1);
      expect(store.purges).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(store.purges).toBe(2);
    } finally {
      await limiter.stop();
      vi.useRealTimers();
    }
  });
});

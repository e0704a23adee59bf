import { describe, expect, it } from 'vitest';
import { silentLogger } from '../logger.ts';
import { RefreshedCache } from './refreshed-cache.ts';

/** A cache over a map standing for the database, on a clock the test moves; the timer never fires here. */
function setup() {
  const rows = new Map<string, string>([
    ['a', 'a1'],
    ['b', 'b1'],
  ]);
  const reads: string[][] = [];
  let failing = false;
  let now = 1_000;
  const warnings: string[] = [];
  const cache = new RefreshedCache<string>({
    name: 'test',
    loadMany: async (keys) => {
      reads.push(keys);
      if (failing) throw new Error('database unreachable');
      return new Map(keys.flatMap((key) => (rows.has(key) ? [[key, rows.get(key)!] as const] : [])));
    },
    refreshEveryMs: 3_600_000,
    maxAgeMs: 5_000,
    now: () => now,
    logger: { ...silentLogger, warn: (_details, message) => warnings.push(message) },
  });
  const load = (key: string) => cache.set(key, rows.get(key)!, now, cache.currentGeneration);
  return {
    cache,
    rows,
    reads,
    warnings,
    load,
    fail: (value: boolean) => {
      failing = value;
    },
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe('refreshed cache', () => {
  it('re-reads the entries in use in one call, drops deleted ones and lets unused ones age out', async () => {
    const t = setup();
    t.load('a');
    t.load('b');
    await t.cache.refresh();
    expect(t.reads).toEqual([['a', 'b']]);
    t.rows.set('a', 'a2');
    t.rows.delete('b');
    expect(t.cache.get('a')).toBe('a1');
    expect(t.cache.get('b')).toBe('b1');
    await t.cache.refresh();
    expect(t.cache.get('a')).toBe('a2');
    // b no longer exists: the caller must ask the database (and find nothing).
    expect(t.cache.get('b')).toBeUndefined();
    await t.cache.refresh();
    // a was used since the last re-read, b is gone; then nobody uses a: it is not re-read, but still
    // served (a caller back after a pause finds it) until it is too old.
    await t.cache.refresh();
    expect(t.reads).toEqual([['a', 'b'], ['a', 'b'], ['a']]);
    expect(t.cache.size).toBe(1);
    t.advance(5_001);
    await t.cache.refresh();
    expect(t.reads).toEqual([['a', 'b'], ['a', 'b'], ['a']]);
    expect(t.cache.size).toBe(0);
  });

  it('never serves an entry past its maximum age, even when its re-read failed', async () => {
    const t = setup();
    t.load('a');
    t.fail(true);
    t.advance(3_000);
    await t.cache.refresh();
    expect(t.warnings).toEqual([expect.stringMatching(/refreshing the test cache failed/)]);
    expect(t.cache.get('a')).toBe('a1');
    t.advance(2_001);
    expect(t.cache.get('a')).toBeUndefined();
  });

  it('a value read before an invalidation is not stored, and a re-read in flight does not bring one back', async () => {
    const t = setup();
    const before = t.cache.currentGeneration;
    t.cache.delete('a');
    expect(t.cache.set('a', 'stale', 1_000, before)).toBe(false);
    expect(t.cache.get('a')).toBeUndefined();
    t.load('a');
    const reread = t.cache.refresh();
    t.cache.clear();
    t.rows.set('a', 'a3');
    t.load('a');
    t.rows.set('a', 'a4');
    await reread;
    // The re-read began before clear(): its answer ('a3' or older) is dropped; the fresh load stays.
    expect(t.cache.get('a')).toBe('a3');
  });
});

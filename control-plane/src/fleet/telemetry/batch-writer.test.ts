import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type BatchBuffer, BatchWriter } from './batch-writer.ts';

describe('BatchWriter', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  function writer(write: (rows: number[]) => Promise<void>) {
    return new BatchWriter<number>({ write, flushIntervalMs: 250, maxBatch: 100, maxPending: 1_000 });
  }

  it('keeps no timer while nothing is queued; a row waits one flush interval for its batch', async () => {
    const written: number[][] = [];
    const rows = writer(async (batch) => {
      written.push(batch);
    });
    rows.start();
    // Idle: nothing wakes the process (a tick every 250 ms did, with nothing to write).
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(written).toEqual([]);

    rows.add([1, 2]);
    rows.add([3]);
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(249);
    expect(written).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(written).toEqual([[1, 2, 3]]);
    expect(vi.getTimerCount()).toBe(0);
    await rows.stop();
  });

  it('retries a failed batch after a flush interval, then sleeps again', async () => {
    let failures = 1;
    const written: number[][] = [];
    const rows = writer(async (batch) => {
      if (failures-- > 0) throw new Error('database away');
      written.push(batch);
    });
    rows.start();
    rows.add([7]);
    await vi.advanceTimersByTimeAsync(250);
    expect(written).toEqual([]);
    expect(rows.pending).toBe(1);
    // The failed batch is back at the front with its own wait.
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(250);
    expect(written).toEqual([[7]]);
    expect(vi.getTimerCount()).toBe(0);
    await rows.stop();
  });

  it('writes a full batch at once and what is left at stop', async () => {
    const written: number[][] = [];
    const rows = writer(async (batch) => {
      written.push(batch);
    });
    rows.start();
    rows.add(Array.from({ length: 100 }, (_, i) => i));
    await vi.advanceTimersByTimeAsync(0);
    expect(written.map((b) => b.length)).toEqual([100]);
    rows.add([100]);
    await rows.stop();
    expect(written.map((b) => b.length)).toEqual([100, 1]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("writes an owner's buffer (sums per key) on its timer only, keeps what fails and says so to flushOrThrow", async () => {
    /** Counts per key, merged on put-back: what the request log keeps. */
    class Sums implements BatchBuffer<[string, number]> {
      counts = new Map<string, number>();
      get size() {
        return this.counts.size;
      }
      add(key: string) {
        this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
      }
      drain() {
        const rows = [...this.counts].sort(([a], [b]) => a.localeCompare(b));
        this.counts = new Map();
        return rows;
      }
      putBack(rows: [string, number][]) {
        for (const [key, n] of rows) this.counts.set(key, (this.counts.get(key) ?? 0) + n);
      }
    }
    const sums = new Sums();
    const written: [string, number][][] = [];
    const order: string[] = [];
    let failures = 5;
    const rows = new BatchWriter<[string, number]>({
      buffer: sums,
      write: async (batch) => {
        if (failures-- > 0) throw new Error('database away');
        written.push(batch);
        order.push('write');
      },
      flushIntervalMs: 250,
      maxBatch: 2,
      flushAt: Number.POSITIVE_INFINITY,
      maxAttempts: Number.POSITIVE_INFINITY,
      betweenBatches: async () => {
        order.push('between');
      },
    });
    rows.start();
    for (const key of ['b', 'a', 'c', 'a']) {
      sums.add(key);
      rows.queued();
    }
    // Past maxBatch, but only the timer writes.
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(failures).toBe(5);
    await expect(rows.flushOrThrow()).rejects.toThrow('database away');
    // Kept through more failures than the default three attempts, merged with what came meanwhile.
    for (let i = 0; i < 4; i++) await rows.flush();
    sums.add('a');
    rows.queued();
    expect(rows.pending).toBe(3);
    await rows.flushOrThrow();
    expect(written).toEqual([
      [
        ['a', 3],
        ['b', 1],
      ],
      [['c', 1]],
    ]);
    expect(order).toEqual(['write', 'between', 'write']);
    await rows.stop();
  });
});

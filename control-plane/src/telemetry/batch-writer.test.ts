import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BatchWriter } from './batch-writer.ts';

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
});

import type { LogEntry } from '@anvil/shared/protocol';
import { describe, expect, it } from 'vitest';
import { entryBytes, LogBuffer } from './buffer.ts';

const entry = (n: number, containerId = 'c1'): LogEntry => ({
  workloadId: 'w1',
  containerId,
  stream: 'stdout',
  ts: `2024-05-01T10:00:${String(n).padStart(2, '0')}.000000000Z`,
  line: `line ${n}`.padEnd(20, '.'),
});

describe('LogBuffer', () => {
  it('hands out batches oldest first within the byte and count limits', () => {
    const buffer = new LogBuffer(1_000_000);
    for (let i = 0; i < 10; i++) buffer.push(entry(i));
    expect(buffer.take(1_000_000, 3).map((e) => e.ts.slice(17, 19))).toEqual(['00', '01', '02']);
    const size = entryBytes(entry(3));
    expect(buffer.take(size * 2, 100)).toHaveLength(2);
    expect(buffer.length).toBe(5);
    expect(buffer.takeLosses()).toEqual([]);
  });

  it('drops the oldest lines past its bound and counts every one of them', () => {
    const size = entryBytes(entry(0, 'even'));
    const buffer = new LogBuffer(size * 4);
    for (let i = 0; i < 10; i++) buffer.push(entry(i, i % 2 === 0 ? 'even' : 'odd_'));
    expect(buffer.length).toBe(4);
    expect(buffer.bytes).toBeLessThanOrEqual(size * 4);
    expect(buffer.take(1_000_000, 100).map((e) => e.ts.slice(17, 19))).toEqual(['06', '07', '08', '09']);
    const losses = buffer.takeLosses();
    expect(losses.reduce((n, l) => n + l.lines, 0)).toBe(6);
    expect(losses.find((l) => l.containerId === 'even')).toMatchObject({
      lines: 3,
      firstTs: entry(0).ts,
      lastTs: entry(4).ts,
    });
    expect(buffer.takeLosses()).toEqual([]);
  });

  it('puts unsent entries back in front, in order', () => {
    const buffer = new LogBuffer(1_000_000);
    for (let i = 0; i < 4; i++) buffer.push(entry(i));
    const batch = buffer.take(1_000_000, 2);
    buffer.unshift(batch);
    expect(buffer.take(1_000_000, 100).map((e) => e.ts.slice(17, 19))).toEqual(['00', '01', '02', '03']);
  });

  it('names an ended container only once its last line was taken, and again if that send failed', () => {
    const buffer = new LogBuffer(1_000_000);
    buffer.push(entry(0, 'a'));
    buffer.push(entry(1, 'b'));
    buffer.push(entry(2, 'a'));
    buffer.end('w1', 'a');
    buffer.end('w1', 'b');
    expect(buffer.takeEnded()).toEqual([]);
    buffer.take(1_000_000, 2);
    expect(buffer.takeEnded()).toEqual([{ workloadId: 'w1', containerId: 'b' }]);
    // a's last line could not be sent: it is back, and a still waits for it.
    buffer.unshift(buffer.take(1_000_000, 100));
    expect(buffer.takeEnded()).toEqual([]);
    expect(buffer.take(1_000_000, 100)).toHaveLength(1);
    const ended = buffer.takeEnded();
    expect(ended).toEqual([{ workloadId: 'w1', containerId: 'a' }]);
    expect(buffer.takeEnded()).toEqual([]);
    buffer.restoreEnded(ended);
    expect(buffer.takeEnded()).toEqual(ended);
  });
});

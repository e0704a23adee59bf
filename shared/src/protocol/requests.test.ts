import { describe, expect, it, vi } from 'vitest';
import { PendingRequests, RequestTimeoutError } from './requests.ts';

describe('PendingRequests', () => {
  it('resolves the waiter whose id the answer carries', async () => {
    const pending = new PendingRequests<{ id: string; type: string }>();
    const sent: unknown[] = [];
    const answer = pending.request({ id: 'a', type: 'command' }, (m) => sent.push(m), 1000);
    expect(sent).toEqual([{ id: 'a', type: 'command' }]);
    expect(pending.settle({ id: 'b', type: 'reply' })).toBe(false);
    expect(pending.settle({ id: 'a', type: 'reply' })).toBe(true);
    await expect(answer).resolves.toEqual({ id: 'a', type: 'reply' });
    expect(pending.size).toBe(0);
  });

  it('times out with the request named', async () => {
    vi.useFakeTimers();
    try {
      const pending = new PendingRequests<{ id: string }>();
      const answer = pending.request({ id: 'a', type: 'hello' }, () => {}, 500);
      vi.advanceTimersByTime(500);
      await expect(answer).rejects.toThrow(RequestTimeoutError);
      await expect(answer).rejects.toThrow('hello a: no answer within 500 ms');
      expect(pending.settle({ id: 'a' })).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it('rejects at once when sending fails or the connection closes', async () => {
    const pending = new PendingRequests<{ id: string }>();
    const failed = pending.request(
      { id: 'a', type: 'x' },
      () => {
        throw new Error('socket closed');
      },
      1000,
    );
    await expect(failed).rejects.toThrow('socket closed');
    const waiting = pending.request({ id: 'b', type: 'x' }, () => {}, 1000);
    pending.rejectAll(new Error('connection lost'));
    await expect(waiting).rejects.toThrow('connection lost');
    expect(pending.size).toBe(0);
  });
});

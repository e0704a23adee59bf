import { describe, expect, it } from 'vitest';
import { HelloAdmission, MAX_RETRY_AFTER_SECONDS } from './admission.ts';

describe('hello admission', () => {
  it('admits up to the limit of sockets waiting for a welcome, and turns the next away', () => {
    const admission = new HelloAdmission(4, () => 0);
    expect([0, 1, 2, 3].map((waiting) => admission.retryAfter(waiting))).toEqual([null, null, null, null]);
    expect(admission.retryAfter(4)).toBe(1);
  });

  it('gives the agents turned away together slots spread at the pace hellos are welcomed', () => {
    let now = 10_000;
    const admission = new HelloAdmission(4, () => now);
    // Nothing welcomed yet: the limit a second (4), from a second ahead.
    expect(Array.from({ length: 6 }, () => admission.retryAfter(4))).toEqual([1, 2, 2, 2, 2, 3]);
    // Over the last three seconds 40 hellos a second were welcomed: 40 slots a second from now on.
    now = 17_000;
    for (let i = 0; i < 120; i++) {
      now += 25;
      admission.welcomed();
    }
    const hints = Array.from({ length: 120 }, () => admission.retryAfter(4));
    expect(hints).toEqual([...hints].sort((a, b) => (a ?? 0) - (b ?? 0)));
    for (const second of [2, 3]) {
      const given = hints.filter((h) => h === second).length;
      expect(given, `slots in second ${second}`).toBeGreaterThanOrEqual(38);
      expect(given, `slots in second ${second}`).toBeLessThanOrEqual(42);
    }
    // A burst beyond what the horizon serves is told the horizon at most.
    const flood = Array.from({ length: 5_000 }, () => admission.retryAfter(4));
    expect(Math.max(...flood.map((s) => s ?? 0))).toBe(MAX_RETRY_AFTER_SECONDS);
    // Later, with the waiting sockets gone, the next is admitted again.
    expect(admission.retryAfter(3)).toBeNull();
  });
});

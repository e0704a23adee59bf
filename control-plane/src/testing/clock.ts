import type { Clock } from '../auth/clock.ts';

/** A clock tests move by hand instead of sleeping. */
export class ManualClock implements Clock {
  constructor(public current = new Date()) {}
  now(): Date {
    return new Date(this.current);
  }
  advance(ms: number): void {
    this.current = new Date(this.current.getTime() + ms);
  }
  set(at: Date | string): void {
    this.current = new Date(at);
  }
}

/**
 * The system's time, moved forward by hand: it keeps running (timers and polls behave as in production)
 * while a test skips ahead instead of sleeping, past a cache's expiry or to the start of a counting
 * window. Only forward: a cached entry never looks younger than it is.
 */
export class ShiftedClock implements Clock {
  #offsetMs = 0;
  now(): Date {
    return new Date(Date.now() + this.#offsetMs);
  }
  advance(ms: number): void {
    if (ms < 0) throw new Error('a ShiftedClock only moves forward');
    this.#offsetMs += ms;
  }
}

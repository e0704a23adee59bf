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

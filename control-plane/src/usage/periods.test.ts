import { ApiError } from '@anvil/shared';
import { describe, expect, it } from 'vitest';
import { buckets, checkPeriod, startOf, USAGE_PERIODS, windowOf } from './periods.ts';

describe('usage periods', () => {
  it('finds calendar starts in a time zone, across daylight-saving changes', () => {
    // Berlin leaves summer time on 2026-10-25 at 03:00 local (01:00 UTC).
    expect(startOf('day', new Date('2026-10-25T12:00:00Z'), 'Europe/Berlin').toISOString()).toBe(
      '2026-10-24T22:00:00.000Z',
    );
    expect(startOf('day', new Date('2026-10-26T12:00:00Z'), 'Europe/Berlin').toISOString()).toBe(
      '2026-10-25T23:00:00.000Z',
    );
    // ISO week from Monday; month start in New York (UTC-5 in November).
    expect(startOf('week', new Date('2026-11-29T23:30:00Z'), 'UTC').toISOString()).toBe(
      '2026-11-23T00:00:00.000Z',
    );
    expect(startOf('month', new Date('2026-11-01T03:00:00Z'), 'America/New_York').toISOString()).toBe(
      '2026-10-01T04:00:00.000Z',
    );
    // The DST day has 25 hours in Berlin: its day bucket is 25 h long.
    const days = buckets(
      'day',
      new Date('2026-10-24T22:00:00Z'),
      new Date('2026-10-26T00:00:00Z'),
      'Europe/Berlin',
    );
    expect(days.map((d) => (d.end.getTime() - d.start.getTime()) / 3_600_000)).toEqual([25, 24]);
  });

  it('builds rolling and calendar windows with their previous windows', () => {
    const now = new Date('2026-11-24T12:00:00Z');
    const rolling = windowOf('7d', now, 'UTC');
    expect(rolling.start.toISOString()).toBe('2026-11-17T12:00:00.000Z');
    expect(rolling.previous.start.toISOString()).toBe('2026-11-10T12:00:00.000Z');
    const month = windowOf('month', now, 'UTC');
    expect(month.start.toISOString()).toBe('2026-11-01T00:00:00.000Z');
    expect(month.previous).toEqual({ start: new Date('2026-10-01T00:00:00Z'), end: month.start });
    expect(windowOf('1y', now, 'UTC').start.toISOString()).toBe('2025-11-24T12:00:00.000Z');
  });

  it('refuses periods outside the list with INVALID_PERIOD', () => {
    expect(checkPeriod('180d', USAGE_PERIODS)).toBe('180d');
    try {
      checkPeriod('2w', USAGE_PERIODS);
      throw new Error('accepted');
    } catch (error) {
      expect(error).toBeInstanceOf(ApiError);
      expect((error as ApiError).code).toBe('INVALID_PERIOD');
      expect((error as ApiError).details).toEqual({ validPeriods: USAGE_PERIODS, received: '2w' });
    }
  });
});

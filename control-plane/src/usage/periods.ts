import { ApiError } from '@anvil/shared';

/**
 * Report periods and calendar arithmetic in an IANA time zone. Rolling periods (`1d` … `1y`) end now and
 * reach back N×24 hours (1y = 365 days); calendar periods (`day`, `week`, `month`) run from the start of the
 * current day, ISO week (Monday) or month in the time zone until now. Pure: no database.
 */

const DAY = 86_400_000;

export const ROLLING_PERIODS = {
  '1d': DAY,
  '7d': 7 * DAY,
  '30d': 30 * DAY,
  '90d': 90 * DAY,
  '180d': 180 * DAY,
  '1y': 365 * DAY,
} as const;
export const CALENDAR_PERIODS = ['day', 'week', 'month'] as const;
/** Every period value the spec names for the usage reports. */
export const USAGE_PERIODS = [...Object.keys(ROLLING_PERIODS), ...CALENDAR_PERIODS] as string[];
/** /usage/detailed names its own list. */
export const DETAILED_PERIODS = ['1d', '7d', '30d', '90d'];

export interface Window {
  period: string;
  start: Date;
  end: Date;
  /** The equally long window right before (calendar periods: the whole previous day, week or month). */
  previous: { start: Date; end: Date };
}

export function checkPeriod(value: string, allowed: string[]): string {
  if (!allowed.includes(value)) {
    throw new ApiError('INVALID_PERIOD', `period "${value}" is not allowed here`, {
      validPeriods: allowed,
      received: value,
    });
  }
  return value;
}

export function windowOf(period: string, now: Date, timeZone: string): Window {
  const rolling = (ROLLING_PERIODS as Record<string, number>)[period];
  if (rolling !== undefined) {
    const start = new Date(now.getTime() - rolling);
    return { period, start, end: now, previous: { start: new Date(start.getTime() - rolling), end: start } };
  }
  const unit = period === 'day' ? 'day' : period === 'week' ? 'week' : 'month';
  const start = startOf(unit, now, timeZone);
  const previousStart = startOf(unit, new Date(start.getTime() - 1), timeZone);
  return { period, start, end: now, previous: { start: previousStart, end: start } };
}

interface LocalDate {
  year: number;
  month: number;
  day: number;
  hour: number;
  weekday: number;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
      weekday: 'short',
    });
    formatters.set(timeZone, f);
  }
  return f;
}

const WEEKDAYS = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'];

function partsOf(date: Date, timeZone: string): LocalDate & { minute: number; second: number } {
  const parts: Record<string, string> = {};
  for (const part of formatter(timeZone).formatToParts(date)) parts[part.type] = part.value;
  return {
    year: Number(parts['year']),
    month: Number(parts['month']),
    day: Number(parts['day']),
    hour: Number(parts['hour']),
    minute: Number(parts['minute']),
    second: Number(parts['second']),
    weekday: WEEKDAYS.indexOf(parts['weekday'] ?? 'Mon'),
  };
}

/** Milliseconds the zone's wall clock is ahead of UTC at `date`. */
export function offsetMs(date: Date, timeZone: string): number {
  const p = partsOf(date, timeZone);
  const wall = Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
  return wall - Math.floor(date.getTime() / 1000) * 1000;
}

/** The instant the zone's wall clock shows year-month-day hour:00 (days may overflow: Date.UTC normalises). */
export function zonedTime(year: number, month: number, day: number, hour: number, timeZone: string): Date {
  const wall = Date.UTC(year, month - 1, day, hour);
  const first = wall - offsetMs(new Date(wall), timeZone);
  const second = wall - offsetMs(new Date(first), timeZone);
  return new Date(second);
}

export type Unit = 'hour' | 'day' | 'week' | 'month';

/** Start of the hour, day, ISO week (Monday) or month containing `date`, in the zone. */
export function startOf(unit: Unit, date: Date, timeZone: string): Date {
  const p = partsOf(date, timeZone);
  switch (unit) {
    case 'hour':
      return zonedTime(p.year, p.month, p.day, p.hour, timeZone);
    case 'day':
      return zonedTime(p.year, p.month, p.day, 0, timeZone);
    case 'week':
      return zonedTime(p.year, p.month, p.day - p.weekday, 0, timeZone);
    case 'month':
      return zonedTime(p.year, p.month, 1, 0, timeZone);
  }
}

/** The start of the next unit after `start` (itself a unit start). */
export function nextStart(unit: Unit, start: Date, timeZone: string): Date {
  if (unit === 'hour') return new Date(start.getTime() + 3_600_000);
  const p = partsOf(start, timeZone);
  if (unit === 'day') return zonedTime(p.year, p.month, p.day + 1, 0, timeZone);
  if (unit === 'week') return zonedTime(p.year, p.month, p.day + 7, 0, timeZone);
  return zonedTime(p.year, p.month + 1, 1, 0, timeZone);
}

/** Consecutive buckets of `unit` covering [from, to): the first starts at the unit containing `from`. */
export function buckets(unit: Unit, from: Date, to: Date, timeZone: string): { start: Date; end: Date }[] {
  const out: { start: Date; end: Date }[] = [];
  let start = startOf(unit, from, timeZone);
  while (start < to) {
    const end = nextStart(unit, start, timeZone);
    out.push({ start, end });
    start = end;
  }
  return out;
}

export function isTimeZone(value: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: value });
    return true;
  } catch {
    return false;
  }
}

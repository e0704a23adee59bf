import { ApiError } from '@anvil/shared';

/**
 * Collects what is wrong with a request's parameters so one 400 INVALID_PARAMETERS names every bad
 * parameter: details `{<parameter>: <reason>}` (the spec's "details per parameter").
 */
export class ParamErrors {
  readonly details: Record<string, string> = {};

  add(parameter: string, reason: string): void {
    this.details[parameter] ??= reason;
  }

  get empty(): boolean {
    return Object.keys(this.details).length === 0;
  }

  throwIfAny(): void {
    if (this.empty) return;
    const names = Object.keys(this.details);
    throw new ApiError('INVALID_PARAMETERS', `invalid parameters: ${names.join(', ')}`, { ...this.details });
  }

  /** An ISO 8601 date-time parameter; undefined when absent (or when it is invalid: recorded). */
  time(parameter: string, value: string | undefined, required = false): Date | undefined {
    if (value === undefined || value === '') {
      if (required) this.add(parameter, 'is required (ISO 8601 date-time)');
      return undefined;
    }
    const ms = Date.parse(value);
    if (Number.isNaN(ms) || !/^\d{4}-\d{2}-\d{2}/.test(value)) {
      this.add(parameter, 'must be an ISO 8601 date-time, e.g. 2026-11-24T10:00:00Z');
      return undefined;
    }
    return new Date(ms);
  }

  /** One of a fixed set of values. */
  oneOf<T extends string>(
    parameter: string,
    value: string | undefined,
    allowed: readonly T[],
    fallback: T,
  ): T {
    if (value === undefined || value === '') return fallback;
    if ((allowed as readonly string[]).includes(value)) return value as T;
    this.add(parameter, `must be one of ${allowed.join(', ')}`);
    return fallback;
  }

  /** Checks that `start` is before `end` (both present). */
  order(start: Date | undefined, end: Date | undefined, endName = 'end_time'): void {
    if (start && end && end.getTime() <= start.getTime()) this.add(endName, 'must be after start_time');
  }
}

/** Splits repeated or comma-separated list parameters (`metrics=a,b&metrics=c`). */
export function listParam(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  return (Array.isArray(value) ? value : [value])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean);
}

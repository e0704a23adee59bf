import { describe, expect, it } from 'vitest';
import {
  checkFilePath,
  formatFileMode,
  nextRotationOf,
  parseFileMode,
  validateRotationPolicy,
} from './rules.ts';

describe('secret field rules', () => {
  it('reads file modes as octal text or numbers and writes them as four octal digits', () => {
    expect(parseFileMode('0400')).toBe(0o400);
    expect(parseFileMode('440')).toBe(0o440);
    expect(parseFileMode('0o600')).toBe(0o600);
    expect(parseFileMode(256)).toBe(0o400);
    expect(parseFileMode('0800')).toBeNull();
    expect(parseFileMode(512)).toBeNull();
    expect(parseFileMode(-1)).toBeNull();
    expect(formatFileMode(0o400)).toBe('0400');
    expect(formatFileMode(0o7)).toBe('0007');
  });

  it('accepts absolute file paths only', () => {
    expect(checkFilePath('/run/secrets/a.txt')).toBe('/run/secrets/a.txt');
    for (const bad of ['run/x', '/a/../b', '/a/./b', '/a//b', '/a/', '/', '/proc/x', `/${'a'.repeat(255)}`]) {
      expect(() => checkFilePath(bad), bad).toThrow();
    }
  });

  it('computes next_rotation from the last rotation, or the creation before the first', () => {
    const created = new Date('2026-01-01T00:00:00Z');
    const policy = validateRotationPolicy({ enabled: true, rotation_interval_days: 30 });
    expect(nextRotationOf(policy, null, created)?.toISOString()).toBe('2026-01-31T00:00:00.000Z');
    expect(nextRotationOf(policy, new Date('2026-02-10T12:00:00Z'), created)?.toISOString()).toBe(
      '2026-03-12T12:00:00.000Z',
    );
    expect(nextRotationOf({ ...policy, enabled: false }, null, created)).toBeNull();
    expect(nextRotationOf(null, null, created)).toBeNull();
  });

  it('merges a partial policy with the current one and checks it', () => {
    const current = validateRotationPolicy({
      enabled: true,
      rotation_interval_days: 30,
      notification_days_before: 5,
    });
    expect(validateRotationPolicy({ rotation_interval_days: 60 }, current)).toEqual({
      enabled: true,
      rotation_interval_days: 60,
      notification_days_before: 5,
    });
    expect(() => validateRotationPolicy({ enabled: true })).toThrow(/required/);
    expect(() => validateRotationPolicy({ rotation_interval_days: 5 }, current)).toThrow(/less than/);
  });
});

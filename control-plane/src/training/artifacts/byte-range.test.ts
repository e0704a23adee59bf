import { describe, expect, it } from 'vitest';
import { parseRange } from './byte-range.ts';

describe('parseRange', () => {
  it('reads one range of a known size, and ignores what a server may ignore', () => {
    expect(parseRange('bytes=0-99', 1000)).toEqual({ start: 0, end: 99 });
    expect(parseRange('bytes=500-', 1000)).toEqual({ start: 500, end: 999 });
    expect(parseRange('bytes=900-5000', 1000)).toEqual({ start: 900, end: 999 });
    expect(parseRange('bytes=-100', 1000)).toEqual({ start: 900, end: 999 });
    expect(parseRange('bytes=-5000', 1000)).toEqual({ start: 0, end: 999 });
    for (const ignored of [
      undefined,
      '',
      'items=0-1',
      'bytes=0-1,5-6',
      'bytes=9-3',
      'bytes=-',
      'bytes=a-b',
    ]) {
      expect(parseRange(ignored, 1000), String(ignored)).toBeNull();
    }
    expect(parseRange('bytes=1000-', 1000)).toBe('unsatisfiable');
    expect(parseRange('bytes=-0', 1000)).toBe('unsatisfiable');
  });
});

import { describe, expect, it } from 'vitest';
import { exitCodeForStatus } from './exit-codes.ts';
import { bytes, details, parseBytes, table } from './output.ts';

describe('table output', () => {
  it('pads columns to the widest cell, upper-cases headers, shows null as "-" and leaves no trailing spaces', () => {
    const rows = [
      { id: 'cluster_a', name: 'dev', gpus: 2 },
      { id: 'cluster_bbbbbb', name: null, gpus: 10 },
    ];
    const text = table(rows, [
      { header: 'id', value: (r) => r.id },
      { header: 'name', value: (r) => r.name },
      { header: 'gpus', value: (r) => r.gpus },
    ]);
    expect(text).toBe(
      'ID               NAME   GPUS\n' + 'cluster_a        dev    2\n' + 'cluster_bbbbbb   -      10\n',
    );
    expect(text.split('\n').every((line) => line === line.trimEnd())).toBe(true);
  });

  it('keeps a cell on one line and prints objects as JSON', () => {
    const text = table([{ v: 'a\nb' }, { v: { x: 1 } }], [{ header: 'v', value: (r) => r.v }]);
    expect(text).toBe('V\na b\n{"x":1}\n');
  });

  it('prints details as aligned "Key:  value" lines', () => {
    expect(
      details([
        ['ID', 'x'],
        ['Status', null],
      ]),
    ).toBe('ID:      x\nStatus:  -\n');
  });

  it('reads and prints sizes', () => {
    expect(parseBytes('5MiB')).toBe(5 * 1024 * 1024);
    expect(parseBytes('100MB')).toBe(100_000_000);
    expect(parseBytes('1.5 GiB')).toBe(1.5 * 1024 ** 3);
    expect(parseBytes('42')).toBe(42);
    expect(parseBytes('5 parsecs')).toBeNull();
    expect(bytes(512)).toBe('512 B');
    expect(bytes(11 * 1024 * 1024)).toBe('11.0 MiB');
  });
});

describe('exit codes', () => {
  it('map the API status so scripts can tell refusals apart', () => {
    expect([401, 403, 404, 429, 400, 409, 422, 500, 502].map(exitCodeForStatus)).toEqual([
      3, 4, 5, 7, 6, 6, 6, 1, 1,
    ]);
  });
});

export interface Column<T> {
  header: string;
  value: (row: T) => unknown;
}

/** Text as a table cell: null and undefined read "-", objects and arrays compact JSON, on one line. */
export function cell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value).replace(/\s+/g, ' ');
}

/**
 * A plain table as kubectl prints one: upper-case headers, columns padded to their widest cell, separated by
 * three spaces, no borders, so `grep` and `awk '{print $1}'` work on it. The last column is not padded.
 */
export function table<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const cells = rows.map((row) => columns.map((column) => cell(column.value(row))));
  const headers = columns.map((column) => column.header.toUpperCase());
  const widths = headers.map((header, i) => Math.max(header.length, ...cells.map((line) => line[i]!.length)));
  const render = (line: string[]) =>
    line
      .map((text, i) => (i === line.length - 1 ? text : text.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd();
  return [render(headers), ...cells.map(render)].join('\n') + '\n';
}

/** One record as `Key:  value` lines (get commands). */
export function details(fields: ReadonlyArray<[string, unknown]>): string {
  const width = Math.max(...fields.map(([name]) => name.length)) + 1;
  return fields.map(([name, value]) => `${`${name}:`.padEnd(width)}  ${cell(value)}`).join('\n') + '\n';
}

export function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(count: number): string {
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${count} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

/** "1.5 GiB", "100MB", "5MiB", "1048576" → bytes (option values such as --part-size). */
export function parseBytes(text: string): number | null {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$/i.exec(text);
  if (!match) return null;
  const unit = (match[2] ?? '').toLowerCase().replace(/b$/, '');
  const powers: Record<string, number> = { '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12, ki: 1024, mi: 1024 ** 2 };
  Object.assign(powers, { gi: 1024 ** 3, ti: 1024 ** 4 });
  const factor = powers[unit];
  return factor === undefined ? null : Math.round(Number(match[1]) * factor);
}

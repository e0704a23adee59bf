const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** Binary units, three significant digits: 80 GiB, 1.50 TiB. "—" when unknown. */
export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined) return '—';
  let n = value;
  let unit = 0;
  while (n >= 1024 && unit < UNITS.length - 1) {
    n /= 1024;
    unit++;
  }
  return `${unit === 0 ? n : n.toPrecision(3)} ${UNITS[unit]}`;
}

/** "5 s", "3 min", "2 h", "4 d". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return `${s} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86_400)} d`;
}

/** How long ago an ISO time was, against the browser's clock. */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return 'never';
  return `${duration((now - Date.parse(iso)) / 1000)} ago`;
}

export function percent(value: number | null | undefined): string {
  return value === null || value === undefined ? '—' : `${Math.round(value)} %`;
}

export function number(value: number | null | undefined, unit = ''): string {
  if (value === null || value === undefined) return '—';
  return `${Math.round(value)}${unit ? ` ${unit}` : ''}`;
}

export function dateTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  return new Date(iso).toLocaleString();
}

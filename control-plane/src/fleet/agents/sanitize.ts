/**
 * PostgreSQL refuses NUL characters in text and jsonb values, and an agent reports whatever a container
 * printed or Docker answered. Everything an agent sends passes through here before it is stored, so one
 * stray byte cannot fail a whole batch.
 */
export function cleanText(value: string, maxLength = Number.POSITIVE_INFINITY): string {
  const text = value.includes('\u0000') ? value.replaceAll('\u0000', '\uFFFD') : value;
  return text.length > maxLength ? text.slice(0, maxLength) : text;
}

/** A deep copy with NULs replaced in every string (keys included); numbers that JSON cannot hold become null. */
export function cleanJson<T>(value: T): T {
  return clean(value) as T;
}

function clean(value: unknown): unknown {
  if (typeof value === 'string') return cleanText(value);
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (Array.isArray(value)) return value.map(clean);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[cleanText(key)] = clean(item);
    return out;
  }
  return value;
}

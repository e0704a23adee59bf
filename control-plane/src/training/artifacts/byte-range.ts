/** One byte range of a representation, inclusive bounds (RFC 9110 §14). */
export interface ByteRange {
  start: number;
  end: number;
}

/**
 * The range a `Range` header asks of `size` bytes: `bytes=a-b`, `bytes=a-` or `bytes=-n` (suffix). null:
 * serve the whole file (no header, another unit, or several ranges: a server may ignore Range, and one
 * range is all resuming needs). 'unsatisfiable': the range starts past the end (answer 416).
 */
export function parseRange(header: string | undefined, size: number): ByteRange | null | 'unsatisfiable' {
  if (!header) return null;
  const match = /^bytes=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header.trim());
  if (!match) return null;
  const [, first, last] = match as unknown as [string, string, string];
  if (first === '' && last === '') return null;
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  if (last !== '' && Number(last) < start) return null;
  if (start >= size) return 'unsatisfiable';
  return { start, end };
}

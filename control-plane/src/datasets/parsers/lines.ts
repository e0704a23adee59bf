import type { Readable } from 'node:stream';

/** Longest line kept in memory; a longer one is reported as invalid rather than buffered. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

export type Line = { number: number; bytes: Buffer } | { number: number; tooLong: true };

/**
 * The lines of a byte stream (split on LF at the byte level, which is safe in UTF-8; a trailing CR is
 * dropped), without decoding: each line is decoded by its consumer, so one bad byte spoils one line.
 */
export async function* lines(source: Readable): AsyncGenerator<Line> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let tooLong = false;
  let number = 0;
  const emit = (last: Buffer): Line => {
    number += 1;
    if (tooLong) {
      tooLong = false;
      pending = [];
      pendingBytes = 0;
      return { number, tooLong: true };
    }
    let bytes = pending.length === 0 ? last : Buffer.concat([...pending, last]);
    pending = [];
    pendingBytes = 0;
    if (bytes.length > 0 && bytes[bytes.length - 1] === 0x0d) bytes = bytes.subarray(0, -1);
    return { number, bytes };
  };
  for await (const chunk of source as AsyncIterable<Buffer>) {
    let start = 0;
    for (;;) {
      const end = chunk.indexOf(0x0a, start);
      if (end === -1) break;
      yield emit(chunk.subarray(start, end));
      start = end + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      if (!tooLong) {
        pendingBytes += rest.length;
        if (pendingBytes > MAX_LINE_BYTES) {
          tooLong = true;
          pending = [];
        } else pending.push(Buffer.from(rest));
      }
    }
  }
  if (pendingBytes > 0 || tooLong) yield emit(Buffer.alloc(0));
}

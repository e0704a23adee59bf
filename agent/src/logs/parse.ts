import { StringDecoder } from 'node:string_decoder';

const RFC3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z$/;

/**
 * Docker trims trailing zeros from nanoseconds ("…:05.12Z"), so its timestamps do not sort as
 * strings. Padding to nine digits makes string order time order, which cursors rely on.
 */
export function normaliseTimestamp(ts: string): string | null {
  const match = RFC3339.exec(ts);
  if (!match) return null;
  return `${match[1]}.${(match[2] ?? '').padEnd(9, '0')}Z`;
}

/** Seconds since the epoch for Docker's `since` parameter (whole seconds; finer is filtered after). */
export function timestampSeconds(ts: string): number {
  return Math.floor(Date.parse(ts.replace(/\.\d+Z$/, 'Z')) / 1000);
}

export interface TimedLine {
  ts: string;
  line: string;
}

/** "2024-05-01T10:00:00.123456789Z hello" -> { ts, line }. A line without a stamp gets `fallbackTs`. */
export function parseTimedLine(raw: string, fallbackTs: () => string): TimedLine {
  const space = raw.indexOf(' ');
  const ts = space > 0 ? normaliseTimestamp(raw.slice(0, space)) : normaliseTimestamp(raw);
  if (ts === null) return { ts: fallbackTs(), line: raw };
  return { ts, line: space > 0 ? raw.slice(space + 1) : '' };
}

/** Longest line kept whole; longer ones are cut so one runaway line cannot exhaust the buffer. */
export const MAX_LINE_BYTES = 64 * 1024;

/**
 * Bytes in, complete lines out: keeps the partial last line until its newline arrives, and decodes
 * UTF-8 across chunk boundaries.
 */
export class LineSplitter {
  readonly #decoder = new StringDecoder('utf8');
  #partial = '';

  push(chunk: Buffer | string): string[] {
    this.#partial += typeof chunk === 'string' ? chunk : this.#decoder.write(chunk);
    const lines = this.#partial.split('\n');
    this.#partial = lines.pop() ?? '';
    if (this.#partial.length > MAX_LINE_BYTES) {
      lines.push(this.#partial);
      this.#partial = '';
    }
    return lines.map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l)).map((l) => l.slice(0, MAX_LINE_BYTES));
  }

  /** The stream ended: whatever is left is the last line. */
  end(): string[] {
    const rest = this.#partial + this.#decoder.end();
    this.#partial = '';
    return rest === '' ? [] : [rest.slice(0, MAX_LINE_BYTES)];
  }
}

export interface Frame {
  stream: 'stdout' | 'stderr';
  payload: Buffer;
}

/**
 * Docker's multiplexed log stream (containers without a TTY): frames of an 8-byte header
 * [stream, 0, 0, 0, size uint32 BE] and a payload. Parsed here rather than through two pass-through
 * streams so stdout and stderr lines keep the order Docker sent them in.
 */
export class Demuxer {
  #pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): Frame[] {
    this.#pending = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    const frames: Frame[] = [];
    while (this.#pending.length >= 8) {
      const size = this.#pending.readUInt32BE(4);
      if (this.#pending.length < 8 + size) break;
      const type = this.#pending[0];
      const payload = this.#pending.subarray(8, 8 + size);
      // 0 is stdin (never sent for logs); anything but stderr is treated as stdout.
      frames.push({ stream: type === 2 ? 'stderr' : 'stdout', payload });
      this.#pending = this.#pending.subarray(8 + size);
    }
    return frames;
  }
}

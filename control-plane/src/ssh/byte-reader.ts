import type { Readable } from 'node:stream';

/** Bytes buffered from the stream before it is paused (the SSH channel's window then stays shut). */
const HIGH_WATER_BYTES = 1024 * 1024;

/**
 * Pull-style reading of a stream for a line protocol interleaved with raw bytes (SCP): a line, a
 * byte, or exactly N bytes handed on as they come. Reading less than arrives pauses the stream, so the
 * sender is held back rather than buffered without bound.
 */
export class ByteReader {
  #chunks: Buffer[] = [];
  #length = 0;
  #ended = false;
  #wake: (() => void) | null = null;

  constructor(private readonly stream: Readable) {
    stream.on('data', (chunk: Buffer) => {
      this.#chunks.push(chunk);
      this.#length += chunk.length;
      if (this.#length >= HIGH_WATER_BYTES) stream.pause();
      this.#notify();
    });
    const end = () => {
      this.#ended = true;
      this.#notify();
    };
    stream.once('end', end);
    stream.once('close', end);
    stream.once('error', end);
  }

  /** One byte, or null at the end of the stream. */
  async byte(): Promise<number | null> {
    if (!(await this.#fill())) return null;
    const head = this.#take(1);
    return head[0]!;
  }

  /** Bytes up to a newline (not included), or null when the stream ends first or the line is too long. */
  async line(maxBytes = 64 * 1024): Promise<string | null> {
    const parts: Buffer[] = [];
    let length = 0;
    while (await this.#fill()) {
      const head = this.#chunks[0]!;
      const newline = head.indexOf(0x0a);
      const piece = this.#take(newline < 0 ? head.length : newline + 1);
      parts.push(piece);
      length += piece.length;
      if (newline >= 0)
        return Buffer.concat(parts, length)
          .subarray(0, length - 1)
          .toString('utf8');
      if (length > maxBytes) return null;
    }
    return null;
  }

  /**
   * Hands exactly `count` bytes to `sink` as they arrive, awaiting it (its back-pressure) between
   * chunks; false when the stream ended before all of them came.
   */
  async bytes(count: number, sink: (chunk: Buffer) => Promise<void> | void): Promise<boolean> {
    let left = count;
    while (left > 0) {
      if (!(await this.#fill())) return false;
      const piece = this.#take(Math.min(left, this.#chunks[0]!.length));
      left -= piece.length;
      await sink(piece);
    }
    return true;
  }

  /** True once a byte is buffered; false when none will come. */
  async #fill(): Promise<boolean> {
    while (this.#length === 0) {
      if (this.#ended) return false;
      this.stream.resume();
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
    return true;
  }

  /** Takes up to `count` bytes from the first chunk. */
  #take(count: number): Buffer {
    const head = this.#chunks[0]!;
    const piece = count >= head.length ? head : head.subarray(0, count);
    if (count >= head.length) this.#chunks.shift();
    else this.#chunks[0] = head.subarray(count);
    this.#length -= piece.length;
    if (this.#length < HIGH_WATER_BYTES / 2) this.stream.resume();
    return piece;
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }
}

/**
 * A terminal's output numbered by byte offset (`seq`), keeping the newest `capacity` bytes: a client
 * that reconnects asks for what came after the last byte it has, and learns of a gap when that part
 * was already dropped.
 */
export class OutputBuffer {
  #chunks: Buffer[] = [];
  #size = 0;
  /** Offset of the first byte still held. */
  #start = 0;

  constructor(private readonly capacity: number) {}

  /** Offset of the next byte to be appended (total bytes ever written). */
  get end(): number {
    return this.#start + this.#size;
  }

  get start(): number {
    return this.#start;
  }

  /** Appends and returns the offset of the chunk's first byte. */
  append(chunk: Buffer): number {
    const seq = this.end;
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    while (this.#size > this.capacity && this.#chunks.length > 0) {
      const head = this.#chunks[0]!;
      const excess = this.#size - this.capacity;
      if (head.length <= excess) {
        this.#chunks.shift();
        this.#size -= head.length;
        this.#start += head.length;
      } else {
        this.#chunks[0] = head.subarray(excess);
        this.#size -= excess;
        this.#start += excess;
      }
    }
    return seq;
  }

  /** Bytes from `from` to the end; `from` below the held range starts at the oldest byte held. */
  since(from: number): { seq: number; data: Buffer } {
    const seq = Math.max(from, this.#start);
    if (seq >= this.end) return { seq: this.end, data: Buffer.alloc(0) };
    const all = Buffer.concat(this.#chunks);
    return { seq, data: all.subarray(seq - this.#start) };
  }
}

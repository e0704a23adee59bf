/**
 * Docker's multiplexed attach stream (exec and attach without a TTY): frames of an 8-byte header
 * (stream type: 1 stdout, 2 stderr; three zero bytes; big-endian uint32 length), then the payload.
 * Bytes in, (stream, payload) out, across any chunk boundaries.
 */
export class DockerDemuxer {
  #pending: Buffer = Buffer.alloc(0);

  constructor(private readonly emit: (stream: 'stdout' | 'stderr', payload: Buffer) => void) {}

  push(chunk: Buffer): void {
    let buffer = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    while (buffer.length >= 8) {
      const length = buffer.readUInt32BE(4);
      if (buffer.length < 8 + length) break;
      const type = buffer[0];
      const payload = buffer.subarray(8, 8 + length);
      // Type 0 (stdin) is never sent by Docker; treat it, and 1, as stdout rather than drop bytes.
      if (payload.length > 0) this.emit(type === 2 ? 'stderr' : 'stdout', payload);
      buffer = buffer.subarray(8 + length);
    }
    this.#pending = Buffer.from(buffer);
  }

  /** Bytes of an incomplete frame still held. */
  get pendingBytes(): number {
    return this.#pending.length;
  }
}

/**
 * Docker's multiplexed attach stream (exec and attach without a TTY): frames of an 8-byte header
 * (stream type: 1 stdout, 2 stderr; three zero bytes; big-endian uint32 length), then the payload.
 * Bytes in, (stream, payload) out, across any chunk boundaries.
 */
export class DockerDemuxer {
  /** Chunks holding an incomplete frame, joined once when it completes (not on every chunk). */
  #pending: Buffer[] = [];
  #pendingLength = 0;

  constructor(private readonly emit: (stream: 'stdout' | 'stderr', payload: Buffer) => void) {}

  push(chunk: Buffer): void {
    let buffer = chunk;
    if (this.#pendingLength > 0) {
      this.#pending.push(chunk);
      this.#pendingLength += chunk.length;
      if (!this.#complete()) return;
      buffer = Buffer.concat(this.#pending, this.#pendingLength);
      this.#pending = [];
      this.#pendingLength = 0;
    }
    while (buffer.length >= 8) {
      const length = buffer.readUInt32BE(4);
      if (buffer.length < 8 + length) break;
      const type = buffer[0];
      const payload = buffer.subarray(8, 8 + length);
      // Type 0 (stdin) is never sent by Docker; treat it, and 1, as stdout rather than drop bytes.
      if (payload.length > 0) this.emit(type === 2 ? 'stderr' : 'stdout', payload);
      buffer = buffer.subarray(8 + length);
    }
    if (buffer.length > 0) {
      // A view, not a copy: the chunk is not reused by the socket.
      this.#pending = [buffer];
      this.#pendingLength = buffer.length;
    }
  }

  /** Whether the pending chunks hold a whole frame (its header included). */
  #complete(): boolean {
    if (this.#pendingLength < 8) return false;
    const head = this.#pending[0]!.length >= 8 ? this.#pending[0]! : Buffer.concat(this.#pending, 8);
    return this.#pendingLength >= 8 + head.readUInt32BE(4);
  }

  /** Bytes of an incomplete frame still held. */
  get pendingBytes(): number {
    return this.#pendingLength;
  }
}

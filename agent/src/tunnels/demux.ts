export type DockerStream = 'stdout' | 'stderr';

/**
 * Docker's multiplexed attach stream (exec and attach without a TTY): frames of an 8-byte header
 * (stream type: 1 stdout, 2 stderr; three zero bytes; big-endian uint32 length), then the payload.
 * Bytes in, (stream, payloads) out, across any chunk boundaries. Docker frames its output in pieces of
 * at most 32 KiB, so a socket read holds several: the frames of one stream that follow each other in a
 * chunk come out together, as one run (the tunnel sends a run as one frame, not one per Docker frame).
 */
export class DockerDemuxer {
  /** Chunks holding an incomplete frame, joined once when it completes (not on every chunk). */
  #pending: Buffer[] = [];
  #pendingLength = 0;
  /** The run being gathered from the current chunk. */
  #run: { stream: DockerStream; payloads: Buffer[] } | null = null;

  constructor(private readonly emit: (stream: DockerStream, payloads: Buffer[]) => void) {}

  push(chunk: Buffer): void {
    this.#split(chunk);
    this.#endRun();
  }

  #split(chunk: Buffer): void {
    let buffer = chunk;
    if (this.#pendingLength > 0) {
      this.#pending.push(chunk);
      this.#pendingLength += chunk.length;
      const frameLength = this.#completeFrameLength();
      if (frameLength === null) return;
      // Only the frame that spans chunks is joined: it ends in this chunk (it was incomplete without
      // it), whose rest is read in place. Joining the whole chunk copied nearly every byte of a stream.
      const frame = Buffer.concat(this.#pending, frameLength);
      buffer = chunk.subarray(chunk.length - (this.#pendingLength - frameLength));
      this.#pending = [];
      this.#pendingLength = 0;
      this.#emitFrame(frame);
    }
    while (buffer.length >= 8) {
      const length = buffer.readUInt32BE(4);
      if (buffer.length < 8 + length) break;
      this.#emitFrame(buffer.subarray(0, 8 + length));
      buffer = buffer.subarray(8 + length);
    }
    if (buffer.length > 0) {
      // A view, not a copy: the chunk is not reused by the socket.
      this.#pending = [buffer];
      this.#pendingLength = buffer.length;
    }
  }

  /** One whole frame, header included: added to the run of its stream, or ending the other's. */
  #emitFrame(frame: Buffer): void {
    const payload = frame.subarray(8);
    if (payload.length === 0) return;
    // Type 0 (stdin) is never sent by Docker; treat it, and 1, as stdout rather than drop bytes.
    const stream = frame[0] === 2 ? 'stderr' : 'stdout';
    if (this.#run?.stream !== stream) {
      this.#endRun();
      this.#run = { stream, payloads: [] };
    }
    this.#run.payloads.push(payload);
  }

  #endRun(): void {
    const run = this.#run;
    this.#run = null;
    if (run) this.emit(run.stream, run.payloads);
  }

  /** The length of the first frame (its header included) once the pending chunks hold all of it. */
  #completeFrameLength(): number | null {
    if (this.#pendingLength < 8) return null;
    const head = this.#pending[0]!.length >= 8 ? this.#pending[0]! : Buffer.concat(this.#pending, 8);
    const length = 8 + head.readUInt32BE(4);
    return this.#pendingLength >= length ? length : null;
  }

  /** Bytes of an incomplete frame still held. */
  get pendingBytes(): number {
    return this.#pendingLength;
  }
}

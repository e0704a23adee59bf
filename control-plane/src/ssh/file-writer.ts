import { finished } from './container-exec.ts';
import { type ContainerFs, errorOf, type FileWriteStream, type FsError } from './container-fs.ts';

/** Bytes gathered before they are written out without waiting for the turn of the event loop to end. */
const BATCH_BYTES = 128 * 1024;

interface Batch {
  parts: Buffer[];
  bytes: number;
  done: ((error: FsError | null) => void)[];
  scheduled: boolean;
}

/** A write's answer, released only after every earlier write's. */
interface Ack {
  done: boolean;
  error: FsError | null;
  resolve: (error: FsError | null) => void;
}

interface Stream {
  session: FileWriteStream['session'];
  stderr: Buffer[];
  batch: Batch;
}

/**
 * Writes of one open file at any offsets, through a streaming writer in the container: writes at the
 * offset where the stream stands (what clients send, pipelined in order) go straight into it; any other
 * offset (a rewrite, a gap, a resumed upload) first lets the stream finish, so the file holds everything
 * before it, then writes on from a writer opened at that offset. `settle()` is the same barrier for
 * requests that must see the bytes on disk (FSTAT, FSETSTAT, CLOSE). A write is acknowledged once the
 * tunnel took it, and never before an earlier write: OpenSSH's client takes an acknowledgement out of
 * order for a failed transfer and truncates the file to what was acknowledged in order (the stdin
 * stream's write callbacks do not always come in order). A failure of the writer is reported by the
 * next write and at close.
 */
export class FileWriter {
  #stream: Stream | null;
  /** File offset the current stream writes next. */
  #position = 0;
  #failed: FsError | null = null;
  /** The queue of writes and barriers that must wait for the stream to finish or reopen. */
  #queue: Promise<void> | null = null;
  #inFlight = 0;
  #idle: (() => void)[] = [];
  /** Answers of the writes not yet released, in the order the writes came. */
  #acks: Ack[] = [];

  constructor(
    private readonly fs: ContainerFs,
    readonly path: string,
    first: FileWriteStream,
    private readonly append: boolean,
  ) {
    this.#stream = this.#adopt(first);
  }

  write(offset: number, data: Buffer): Promise<FsError | null> {
    return new Promise((resolve) => {
      const ack: Ack = { done: false, error: null, resolve };
      this.#acks.push(ack);
      const done = (error: FsError | null) => {
        ack.done = true;
        ack.error = error;
        while (this.#acks[0]?.done) {
          const next = this.#acks.shift()!;
          next.resolve(next.error);
        }
      };
      // Appending writes land at the end whatever offset they name (O_APPEND).
      const at = this.append ? null : offset;
      if (!this.#queue && !this.#failed && this.#stream && (at === null || at === this.#position)) {
        this.#emit(this.#stream, data, done);
        return;
      }
      // Behind a reopen or barrier, or itself needing one: queued. The queue waits for a reopen, never
      // for the tunnel to take a write.
      void this.#after(async () => {
        const target = at ?? this.#position;
        try {
          if (!this.#failed && (!this.#stream || target !== this.#position)) {
            await this.#finishStream();
            if (!this.#failed) await this.#openAt(target);
          }
        } catch (error) {
          // The container could not be reached to reopen the file.
          this.#failed ??= { kind: 'failure', reason: (error as Error).message };
        }
        if (this.#failed || !this.#stream) done(this.#failed);
        else this.#emit(this.#stream, data, done);
      });
    });
  }

  /** Settles once every write so far is in the file (the stream finished; the next write reopens). */
  settle(): Promise<FsError | null> {
    return this.#after(async () => {
      await this.#finishStream();
      return this.#failed;
    });
  }

  /** Finishes the stream; the file's first error, if any. */
  close(): Promise<FsError | null> {
    return this.settle();
  }

  /** Tears the writer down (the session ended without CLOSE). */
  dispose(): void {
    this.#stream?.session.close();
    this.#stream = null;
  }

  /** Runs `step` once the queue before it is done, keeping later calls behind it. */
  #after<T>(step: () => Promise<T>): Promise<T> {
    const previous = this.#queue ?? Promise.resolve();
    const result = previous.then(step);
    const tail = result.then(
      () => {},
      () => {},
    );
    this.#queue = tail;
    tail.then(() => {
      if (this.#queue === tail) this.#queue = null;
    });
    return result;
  }

  #adopt(stream: FileWriteStream): Stream {
    const adopted: Stream = {
      session: stream.session,
      stderr: [],
      batch: { parts: [], bytes: 0, done: [], scheduled: false },
    };
    stream.session.stderr.on('data', (chunk: Buffer) => adopted.stderr.push(chunk));
    stream.session.stdin.on('error', (error: Error) => {
      this.#failed ??= { kind: 'failure', reason: error.message };
    });
    return adopted;
  }

  /**
   * Queues the bytes for the stream; what arrives within one turn of the event loop goes out as one
   * tunnel frame. Clients send 32-64 KiB writes: one tunnel frame and one write into the exec's stdin
   * each cost more than the bytes themselves.
   */
  #emit(stream: Stream, data: Buffer, done: (error: FsError | null) => void): void {
    this.#position += data.length;
    this.#inFlight++;
    const batch = stream.batch;
    batch.parts.push(data);
    batch.bytes += data.length;
    batch.done.push(done);
    if (batch.bytes >= BATCH_BYTES) this.#flush(stream);
    else if (!batch.scheduled) {
      batch.scheduled = true;
      setImmediate(() => this.#flush(stream));
    }
  }

  #flush(stream: Stream): void {
    const { parts, done } = stream.batch;
    stream.batch = { parts: [], bytes: 0, done: [], scheduled: false };
    if (parts.length === 0) return;
    // Corked, the parts reach the tunnel together (its writev) and are copied once, into one frame.
    const stdin = stream.session.stdin;
    stdin.cork();
    for (let i = 0; i < parts.length - 1; i++) stdin.write(parts[i]!);
    stdin.write(parts[parts.length - 1]!, (error) => {
      this.#inFlight -= done.length;
      if (error) this.#failed ??= { kind: 'failure', reason: error.message };
      for (const finish of done) finish(error ? this.#failed : null);
      if (this.#inFlight === 0) for (const wake of this.#idle.splice(0)) wake();
    });
    stdin.uncork();
  }

  async #finishStream(): Promise<void> {
    if (this.#stream) this.#flush(this.#stream);
    if (this.#inFlight > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
    const stream = this.#stream;
    if (!stream) return;
    this.#stream = null;
    stream.session.stdin.end();
    const { code } = await stream.session.exit;
    await finished(stream.session.stderr);
    if (code !== 0) this.#failed ??= errorOf(Buffer.concat(stream.stderr).toString('utf8'), code);
  }

  async #openAt(offset: number): Promise<void> {
    const opened = this.append
      ? await this.fs.openWrite(this.path, {
          create: true,
          exclusive: false,
          truncate: false,
          append: true,
          mode: null,
        })
      : await this.fs.reopenWrite(this.path, offset);
    if (!opened.ok) {
      this.#failed ??= opened.error;
      return;
    }
    this.#stream = this.#adopt(opened.value);
    this.#position = offset;
  }
}

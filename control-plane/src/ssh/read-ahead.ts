import type { ExecSession } from '../fleet/tunnels/types.ts';
import { finished } from './container-exec.ts';
import { errorOf, type FileReadStream, type FsError, type FsResult } from './container-fs.ts';

/** How far the stream may run ahead of what the client asked for before it is paused. */
const READ_AHEAD_BYTES = 4 * 1024 * 1024;
/** Bytes kept behind the lowest point still wanted, for a request that arrives late and out of order. */
const KEEP_BEHIND_BYTES = 1024 * 1024;
/** A request this far beyond the stream is reached by reading on; farther, by reopening at its offset. */
const MAX_SKIP_BYTES = 4 * 1024 * 1024;

/** Opens the file's stream at an offset (ContainerFs.openRead bound to a path). */
export type ReadOpener = (offset: number) => Promise<FsResult<FileReadStream>>;

export class ReadError extends Error {
  constructor(readonly error: FsError) {
    super(error.reason);
  }
}

interface Request {
  offset: number;
  length: number;
  resolve(data: Buffer[] | null): void;
  reject(error: Error): void;
}

/**
 * Serves SFTP READs of one open file from a single streaming reader in the container. Clients keep many
 * reads outstanding at increasing offsets; each is answered as soon as the stream has its bytes, in any
 * order. The stream runs ahead of the requests by a bounded amount (then its exec is paused, which
 * back-pressures the tunnel), keeps a little behind for late requests, and is reopened at the offset of
 * a request it cannot reach (a seek back, or far ahead). The file's size at open tells a real end of
 * file from a stream cut short: only the former is answered EOF without waiting for the exit status.
 */
export class ReadAhead {
  #session: ExecSession | null = null;
  /** File offset of the first retained byte. */
  #base = 0;
  #chunks: Buffer[] = [];
  #length = 0;
  /** The stream ended: nothing beyond #base + #length will come from it. */
  #ended = false;
  /** Why the stream stopped early (a failed read), answered to requests it could not serve. */
  #failure: FsError | null = null;
  #paused = false;
  #reopening = false;
  #closed = false;
  /** End of the furthest range answered since the stream (re)started. */
  #servedEnd = 0;
  #pending: Request[] = [];

  private constructor(
    private readonly open: ReadOpener,
    private sizeAtOpen: number,
  ) {}

  /** Opens the file at offset 0, so a bad path fails the SFTP OPEN itself. */
  static async start(open: ReadOpener): Promise<FsResult<ReadAhead>> {
    const first = await open(0);
    if (!first.ok) return first;
    const reader = new ReadAhead(open, first.value.attrs.size);
    reader.#attach(first.value, 0);
    return { ok: true, value: reader };
  }

  /**
   * Up to `length` bytes at `offset` (fewer only at the end of the file), or null past the end; as the
   * pieces of the stream's chunks they span (views, not copies: a reply goes out without another copy).
   */
  read(offset: number, length: number): Promise<Buffer[] | null> {
    if (this.#closed) return Promise.reject(new Error('file closed'));
    return new Promise((resolve, reject) => {
      this.#pending.push({ offset, length, resolve, reject });
      this.#serve();
    });
  }

  close(): void {
    this.#closed = true;
    this.#stop();
    for (const request of this.#pending.splice(0)) request.reject(new Error('file closed'));
  }

  get #end(): number {
    return this.#base + this.#length;
  }

  #attach(opened: FileReadStream, offset: number): void {
    const { session, head } = opened;
    this.#session = session;
    this.#base = offset;
    this.#chunks = head.length > 0 ? [head] : [];
    this.#length = head.length;
    this.#ended = false;
    this.#failure = null;
    this.#paused = true;
    this.#servedEnd = offset;
    const stderr: Buffer[] = [];
    session.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    session.stdout.on('data', (chunk: Buffer) => {
      if (this.#session !== session) return;
      this.#chunks.push(chunk);
      this.#length += chunk.length;
      this.#serve();
    });
    let done = false;
    const end = () => {
      if (done || this.#session !== session) return;
      done = true;
      // Short of the size the file had at open: a read failed or the file shrank; the exit says which.
      if (this.#end >= this.sizeAtOpen) {
        this.#ended = true;
        this.#serve();
        return;
      }
      session.exit.then(async ({ code }) => {
        await finished(session.stderr);
        if (this.#session !== session) return;
        this.#ended = true;
        if (code !== 0) this.#failure = errorOf(Buffer.concat(stderr).toString('utf8'), code);
        this.#serve();
      });
    };
    session.stdout.once('end', end);
    session.stdout.once('close', end);
    session.stdout.once('error', end);
    this.#serve();
  }

  /** Answers what can be answered, trims what nobody will want, reopens or paces the stream. */
  #serve(): void {
    if (this.#pending.length === 0 && !this.#session) return;
    const end = this.#end;
    this.#pending = this.#pending.filter((request) => {
      const { offset, length } = request;
      if (this.#reopening || offset < this.#base) return true;
      if (offset + length <= end || (this.#ended && offset < end)) {
        const stop = Math.min(offset + length, end);
        request.resolve(this.#slice(offset, stop));
        this.#servedEnd = Math.max(this.#servedEnd, stop);
        return false;
      }
      if (!this.#ended) return true;
      if (this.#failure) request.reject(new ReadError(this.#failure));
      else request.resolve(null);
      return false;
    });
    this.#trim();
    const head = this.#pending[0];
    if (head && !this.#reopening && this.#mustReopen(head)) {
      void this.#reopen(head.offset);
      return;
    }
    this.#pace();
  }

  /** The stream cannot reach the request: it is behind what is retained, or far ahead of the stream. */
  #mustReopen(request: Request): boolean {
    if (request.offset < this.#base || (!this.#session && !this.#ended)) return true;
    if (this.#ended) return false;
    // At or past the end the file had at open, reading on reaches the end (and answers EOF) soon.
    return request.offset > this.#end + MAX_SKIP_BYTES && request.offset < this.sizeAtOpen;
  }

  /** Drops retained bytes below what any pending or next sequential request could want. */
  #trim(): void {
    let low = this.#servedEnd;
    for (const request of this.#pending)
      if (request.offset >= this.#base) low = Math.min(low, request.offset);
    let drop = Math.min(low - KEEP_BEHIND_BYTES - this.#base, this.#length);
    while (drop > 0) {
      const first = this.#chunks[0]!;
      if (first.length <= drop) {
        this.#chunks.shift();
        this.#base += first.length;
        this.#length -= first.length;
        drop -= first.length;
      } else {
        this.#chunks[0] = first.subarray(drop);
        this.#base += drop;
        this.#length -= drop;
        drop = 0;
      }
    }
  }

  /** Runs the stream up to READ_AHEAD_BYTES past the furthest byte wanted, then pauses it. */
  #pace(): void {
    const session = this.#session;
    if (!session || this.#ended) return;
    let wanted = this.#servedEnd;
    for (const request of this.#pending) wanted = Math.max(wanted, request.offset + request.length);
    const ahead = this.#end - wanted;
    if (!this.#paused && ahead >= READ_AHEAD_BYTES) {
      this.#paused = true;
      session.stdout.pause();
    } else if (this.#paused && ahead < READ_AHEAD_BYTES / 2) {
      this.#paused = false;
      session.stdout.resume();
    }
  }

  #slice(from: number, to: number): Buffer[] {
    const parts: Buffer[] = [];
    let at = this.#base;
    for (const chunk of this.#chunks) {
      const chunkEnd = at + chunk.length;
      if (chunkEnd > from && at < to) {
        parts.push(chunk.subarray(Math.max(from - at, 0), Math.min(to - at, chunk.length)));
      }
      if (chunkEnd >= to) break;
      at = chunkEnd;
    }
    return parts;
  }

  async #reopen(offset: number): Promise<void> {
    this.#reopening = true;
    this.#stop();
    this.#ended = false;
    this.#chunks = [];
    this.#length = 0;
    this.#base = offset;
    let opened: FsResult<FileReadStream>;
    try {
      opened = await this.open(offset);
    } catch (error) {
      opened = { ok: false, error: { kind: 'failure', reason: (error as Error).message } };
    }
    this.#reopening = false;
    if (this.#closed) {
      if (opened.ok) opened.value.session.close();
      return;
    }
    if (!opened.ok) {
      // Every request waiting now gets the error; a later one tries again (no stream, not ended).
      for (const request of this.#pending.splice(0)) request.reject(new ReadError(opened.error));
      return;
    }
    this.sizeAtOpen = opened.value.attrs.size;
    this.#attach(opened.value, offset);
  }

  #stop(): void {
    this.#session?.close();
    this.#session = null;
  }
}

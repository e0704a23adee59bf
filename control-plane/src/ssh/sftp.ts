import type { Readable, Writable } from 'node:stream';
import type { Logger } from '../logger.ts';
import {
  type ContainerFs,
  type DirEntry,
  errorOf,
  type FileAttrs,
  type FsError,
  type FsResult,
  isDirectory,
  S_IFMT,
} from './container-fs.ts';
import { FileWriter } from './file-writer.ts';
import { ReadAhead, ReadError } from './read-ahead.ts';
import {
  MAX_MESSAGE_BYTES,
  type NameEntry,
  OPEN_FLAG,
  type SftpAttrs,
  SftpChannel,
  type SftpRequest,
  STATUS,
} from './sftp-wire.ts';

/**
 * Longest READ answered, as sftp-server's (a 256 KiB message less room for its header); a longer READ
 * gets a short read, as from sshd.
 */
const MAX_IO_BYTES = MAX_MESSAGE_BYTES - 1024;

/**
 * Read and write lengths advertised through `limits@openssh.com`: OpenSSH's clients use them for every
 * request instead of 32 KiB (halving the requests and their replies). Not the full 255 KiB: a write that
 * large reaches the container as one tunnel frame and one write into the process's stdin pipe, and
 * uploads measured at half the rate of 64 KiB writes (bench/ssh-scp.ts).
 */
const ADVERTISED_IO_BYTES = 64 * 1024;

/** OpenSSH extensions served, with their versions, as sent in VERSION. */
const EXTENSIONS = { 'limits@openssh.com': '1' };

/**
 * The SFTP server side of the relay, backed by the container's files (ContainerFs): a file open for
 * reading is served by ReadAhead, one open for writing by FileWriter; metadata requests are one short
 * command each, run by the session's helper shell (ContainerExec.prepare). Paths are resolved against
 * the login user's home directory. Runs on a raw `sftp` subsystem channel (SftpChannel speaks the
 * protocol).
 */
export class SftpBackend {
  readonly #handles = new Map<string, Handle>();
  readonly #sftp: SftpChannel;
  #nextHandle = 1;
  #inFlight = 0;
  #idle: (() => void)[] = [];

  constructor(
    channel: Readable & Writable & { exit?(code: number): void },
    private readonly fs: ContainerFs,
    private readonly logger: Logger,
  ) {
    this.#sftp = new SftpChannel(
      channel,
      {
        request: (request) => this.#handle(request),
        // The client's EOF ends the subsystem (as sftp-server exiting does): answer what is in flight,
        // then exit 0 (scp in SFTP mode fails without an exit status) and close.
        end: () =>
          this.#whenIdle(() => {
            this.closeAll();
            this.#sftp.finish(0);
          }),
        close: () => this.closeAll(),
        protocolError: (message) => {
          logger.warn({ reason: message }, 'sftp protocol error');
          this.closeAll();
        },
      },
      EXTENSIONS,
    );
    // Clients resolve "." first (sftp; scp for a relative path), and every relative path needs it:
    // asked of the container now, it is known by then.
    void fs.home();
  }

  #whenIdle(fn: () => void): void {
    if (this.#inFlight === 0) fn();
    else this.#idle.push(fn);
  }

  closeAll(): void {
    for (const handle of this.#handles.values()) handle.dispose();
    this.#handles.clear();
  }

  #status(id: number, error: FsError | null): void {
    if (!error) {
      this.#sftp.status(id, STATUS.OK);
      return;
    }
    const code =
      error.kind === 'no_such_file'
        ? STATUS.NO_SUCH_FILE
        : error.kind === 'permission_denied'
          ? STATUS.PERMISSION_DENIED
          : STATUS.FAILURE;
    this.#sftp.status(id, code, error.reason);
  }

  /** Runs one request; a failure it did not answer itself is answered FAILURE with its message. */
  #handle(request: SftpRequest): void {
    this.#inFlight++;
    this.#serve(request)
      .catch((error: unknown) => {
        if (error instanceof ReadError) return this.#status(request.id, error.error);
        this.logger.warn({ err: error, op: request.type }, 'sftp request failed');
        this.#sftp.status(request.id, STATUS.FAILURE, (error as Error).message);
      })
      .finally(() => {
        this.#inFlight--;
        if (this.#inFlight === 0) for (const wake of this.#idle.splice(0)) wake();
      });
  }

  async #serve(request: SftpRequest): Promise<void> {
    const sftp = this.#sftp;
    const fs = this.fs;
    const { id } = request;
    switch (request.type) {
      case 'REALPATH': {
        const resolved = await fs.resolve(request.path);
        return sftp.name(id, [{ filename: resolved, longname: resolved, attrs: {} }]);
      }
      case 'STAT':
      case 'LSTAT':
        return this.#stat(id, await fs.resolve(request.path), request.type === 'STAT');
      case 'FSTAT': {
        const handle = this.#handleOf(request.handle);
        if (!handle) return sftp.status(id, STATUS.FAILURE, 'invalid handle');
        // The size and times must include every write acknowledged so far.
        if (handle instanceof FileHandle) await handle.settle();
        return this.#stat(id, handle.path, true);
      }
      case 'OPEN': {
        const path = await fs.resolve(request.path);
        const opened =
          request.flags & OPEN_FLAG.WRITE
            ? await this.#openWrite(path, request.flags, request.attrs)
            : await this.#openRead(path);
        if (!opened.ok) return this.#status(id, opened.error);
        return sftp.handle(id, Buffer.from(this.#register(opened.value)));
      }
      case 'READ': {
        const handle = this.#handleOf(request.handle);
        if (!(handle instanceof FileHandle) || !handle.readable)
          return sftp.status(id, STATUS.FAILURE, 'not open for reading');
        const data = await handle.read(request.offset, Math.min(request.length, MAX_IO_BYTES));
        if (data === null) return sftp.status(id, STATUS.EOF);
        return sftp.data(id, data);
      }
      case 'WRITE': {
        const handle = this.#handleOf(request.handle);
        if (!(handle instanceof FileHandle) || !handle.writer)
          return sftp.status(id, STATUS.FAILURE, 'not open for writing');
        return this.#status(id, await handle.write(request.offset, request.data));
      }
      case 'CLOSE': {
        const key = request.handle.toString();
        const handle = this.#handles.get(key);
        if (!handle) return sftp.status(id, STATUS.FAILURE, 'invalid handle');
        this.#handles.delete(key);
        return this.#status(id, await handle.close());
      }
      case 'OPENDIR': {
        const dir = await fs.resolve(request.path);
        const listed = await fs.list(dir);
        if (!listed.ok) return this.#status(id, listed.error);
        return sftp.handle(id, Buffer.from(this.#register(new DirHandle(dir, listed.value))));
      }
      case 'READDIR': {
        const handle = this.#handleOf(request.handle);
        if (!(handle instanceof DirHandle)) return sftp.status(id, STATUS.FAILURE, 'not a directory handle');
        const batch = handle.next(200);
        if (batch.length === 0) return sftp.status(id, STATUS.EOF);
        return sftp.name(id, batch);
      }
      case 'REMOVE':
        return this.#status(
          id,
          await fs.run(
            '[ -d "$1" ] && [ ! -L "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }; rm -f -- "$1"',
            [await fs.resolve(request.path)],
          ),
        );
      case 'RMDIR':
        return this.#status(id, await fs.run('rmdir -- "$1"', [await fs.resolve(request.path)]));
      case 'RENAME':
        // SFTP v3 rename refuses an existing target (posix-rename@openssh.com would replace it).
        return this.#status(
          id,
          await fs.run(
            '[ -e "$2" ] || [ -L "$2" ] && { echo "$2: File exists" >&2; exit 1; }; mv -f -- "$1" "$2"',
            [await fs.resolve(request.from), await fs.resolve(request.to)],
          ),
        );
      case 'MKDIR': {
        const mode = request.attrs.mode !== undefined ? (request.attrs.mode & 0o7777).toString(8) : '755';
        return this.#status(
          id,
          await fs.run('mkdir -m "$2" -- "$1"', [await fs.resolve(request.path), mode]),
        );
      }
      case 'SETSTAT':
        return this.#setstat(id, await fs.resolve(request.path), request.attrs);
      case 'FSETSTAT': {
        const handle = this.#handleOf(request.handle);
        if (!handle) return sftp.status(id, STATUS.FAILURE, 'invalid handle');
        // Times set now must not be bumped by writes still on their way to the file.
        if (handle instanceof FileHandle) await handle.settle();
        return this.#setstat(id, handle.path, request.attrs);
      }
      case 'READLINK': {
        const result = await fs.exec.run('readlink -- "$1"', [await fs.resolve(request.path)]);
        if (result.code !== 0) return this.#status(id, errorOf(result.stderr, result.code));
        const target = result.stdout.toString('utf8').replace(/\n$/, '');
        return sftp.name(id, [{ filename: target, longname: target, attrs: {} }]);
      }
      case 'SYMLINK':
        // OpenSSH's client sends the link's target first (the draft has it the other way round).
        return this.#status(
          id,
          await fs.run('ln -s -- "$1" "$2"', [request.first, await fs.resolve(request.second)]),
        );
      case 'EXTENDED':
        if (request.name === 'limits@openssh.com') {
          // max packet, max read, max write, max open handles (0: no limit of ours).
          return sftp.extendedReply(id, (w) =>
            w.u64(MAX_MESSAGE_BYTES).u64(ADVERTISED_IO_BYTES).u64(ADVERTISED_IO_BYTES).u64(0),
          );
        }
        return sftp.status(id, STATUS.OP_UNSUPPORTED, `${request.name} not supported`);
    }
  }

  #handleOf(raw: Buffer): Handle | undefined {
    return this.#handles.get(raw.toString());
  }

  async #openRead(path: string): Promise<FsResult<Handle>> {
    const started = await ReadAhead.start((offset) => this.fs.openRead(path, offset));
    return started.ok ? { ok: true, value: new FileHandle(this.fs, path, started.value, null) } : started;
  }

  async #openWrite(path: string, flags: number, attrs: SftpAttrs): Promise<FsResult<Handle>> {
    const append = (flags & OPEN_FLAG.APPEND) !== 0;
    const opened = await this.fs.openWrite(path, {
      create: (flags & OPEN_FLAG.CREAT) !== 0,
      exclusive: (flags & OPEN_FLAG.EXCL) !== 0,
      truncate: (flags & OPEN_FLAG.TRUNC) !== 0,
      append,
      mode: attrs.mode !== undefined ? attrs.mode : null,
    });
    if (!opened.ok) return opened;
    const writer = new FileWriter(this.fs, path, opened.value, append);
    return { ok: true, value: new FileHandle(this.fs, path, (flags & OPEN_FLAG.READ) !== 0, writer) };
  }

  #register(handle: Handle): string {
    const id = String(this.#nextHandle++);
    this.#handles.set(id, handle);
    return id;
  }

  async #stat(id: number, path: string, follow: boolean): Promise<void> {
    const stat = await this.fs.stat(path, follow);
    if (!stat.ok) return this.#status(id, stat.error);
    this.#sftp.attrs(id, toAttributes(stat.value));
  }

  async #setstat(id: number, path: string, attrs: SftpAttrs): Promise<void> {
    const { mode, uid, gid, size, atime, mtime } = attrs;
    this.#status(
      id,
      await this.fs.setAttrs(path, {
        ...(mode !== undefined ? { mode } : {}),
        ...(uid !== undefined && gid !== undefined ? { uid, gid } : {}),
        ...(size !== undefined ? { size } : {}),
        ...(atime !== undefined ? { atime } : {}),
        ...(mtime !== undefined ? { mtime } : {}),
      }),
    );
  }
}

function toAttributes(attrs: FileAttrs): SftpAttrs {
  const { mode, size, uid, gid, atime, mtime } = attrs;
  return { mode, size, uid, gid, atime, mtime };
}

interface Handle {
  readonly path: string;
  close(): Promise<FsError | null>;
  dispose(): void;
}

/**
 * An open file: read through ReadAhead, written through FileWriter, or both (`r+`, as sshfs opens
 * files): then a read after writes first lets them reach the file and restarts the reader.
 */
class FileHandle implements Handle {
  #reader: Promise<ReadAhead> | null;
  /** Written since the reader started. */
  #stale = false;
  readonly readable: boolean;

  constructor(
    private readonly fs: ContainerFs,
    readonly path: string,
    reader: ReadAhead | boolean,
    readonly writer: FileWriter | null,
  ) {
    this.readable = reader !== false;
    this.#reader = typeof reader === 'object' ? Promise.resolve(reader) : null;
  }

  async read(offset: number, length: number): Promise<Buffer[] | null> {
    if (this.#stale) {
      this.#stale = false;
      const previous = this.#reader;
      this.#reader = this.settle().then(async (error) => {
        if (error) throw new ReadError(error);
        (await previous?.catch(() => null))?.close();
        return this.#start();
      });
    }
    this.#reader ??= this.#start();
    const reader = this.#reader;
    // A failed start is not kept: the next read tries again.
    reader.catch(() => {
      if (this.#reader === reader) this.#reader = null;
    });
    return (await reader).read(offset, length);
  }

  write(offset: number, data: Buffer): Promise<FsError | null> {
    if (this.readable) this.#stale = true;
    return this.writer!.write(offset, data);
  }

  /** Every write so far is in the file. */
  async settle(): Promise<FsError | null> {
    return this.writer ? this.writer.settle() : null;
  }

  async #start(): Promise<ReadAhead> {
    const started = await ReadAhead.start((offset) => this.fs.openRead(this.path, offset));
    if (!started.ok) throw new ReadError(started.error);
    return started.value;
  }

  async close(): Promise<FsError | null> {
    this.#closeReader();
    return this.writer ? this.writer.close() : null;
  }

  dispose(): void {
    this.#closeReader();
    this.writer?.dispose();
  }

  #closeReader(): void {
    this.#reader?.then(
      (reader) => reader.close(),
      () => {},
    );
  }
}

class DirHandle implements Handle {
  #offset = 0;
  readonly #entries: NameEntry[];
  constructor(
    readonly path: string,
    entries: DirEntry[],
  ) {
    this.#entries = entries.map(({ name, attrs }) => ({
      filename: name,
      longname: longname(name, attrs),
      attrs: toAttributes(attrs),
    }));
  }
  next(count: number): NameEntry[] {
    const batch = this.#entries.slice(this.#offset, this.#offset + count);
    this.#offset += batch.length;
    return batch;
  }
  async close() {
    return null;
  }
  dispose() {}
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const TYPE_LETTERS: Record<number, string> = {
  9604: 'd',
  21609: 'l',
  4802: 'c',
  14406: 'b',
  2401: 'p',
  26411: 's',
};

/** The `ls -l` line sftp's `ls -l` prints. */
function longname(name: string, attrs: FileAttrs): string {
  const kind = isDirectory(attrs) ? 'd' : (TYPE_LETTERS[attrs.mode & S_IFMT] ?? '-');
  const rwx = (bits: number) => `${bits & 4 ? 'r' : '-'}${bits & 2 ? 'w' : '-'}${bits & 1 ? 'x' : '-'}`;
  const perms = `${kind}${rwx(attrs.mode >> 6)}${rwx(attrs.mode >> 3)}${rwx(attrs.mode)}`;
  const date = new Date(attrs.mtime * 1000);
  const when = `${MONTHS[date.getUTCMonth()]} ${String(date.getUTCDate()).padStart(2)} ${String(date.getUTCHours()).padStart(2, '0')}:${String(date.getUTCMinutes()).padStart(2, '0')}`;
  return `${perms} ${String(attrs.nlink).padStart(4)} ${String(attrs.uid).padEnd(8)} ${String(attrs.gid).padEnd(8)} ${String(attrs.size).padStart(8)} ${when} ${name}`;
}

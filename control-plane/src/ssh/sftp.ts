import type { Logger } from 'pino';
import ssh2, { type Attributes, type FileEntry, type SFTPWrapper } from 'ssh2';
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

const { OPEN_MODE, STATUS_CODE } = ssh2.utils.sftp;

/** Longest READ answered in one DATA (as sftp-server: longer requests get a short read, clients go on). */
const MAX_READ_BYTES = 255 * 1024;

/**
 * The SFTP server side, backed by the container's files (ContainerFs): a file open for reading is served
 * by ReadAhead, one open for writing by FileWriter; metadata requests are one short exec each. Paths are
 * resolved against the login user's home directory.
 */
export class SftpBackend {
  readonly #handles = new Map<string, Handle>();
  #nextHandle = 1;
  #inFlight = 0;
  #idle: (() => void)[] = [];

  constructor(
    private readonly sftp: SFTPWrapper,
    private readonly fs: ContainerFs,
    private readonly logger: Logger,
  ) {
    this.#bind();
    sftp.on('close', () => this.closeAll());
    // The client's EOF ends the subsystem (as sftp-server exiting does): answer what is in flight, then close.
    sftp.on('end', () => {
      this.#whenIdle(() => {
        this.closeAll();
        // exit-status 0 as sftp-server's exit gives it: scp (SFTP mode) fails without one.
        const channel = sftp as unknown as {
          _protocol?: { exitStatus(id: number, code: number): void };
          outgoing?: { id: number; state: string };
        };
        if (channel._protocol && channel.outgoing?.state === 'open') {
          channel._protocol.exitStatus(channel.outgoing.id, 0);
        }
        sftp.end();
      });
    });
  }

  #whenIdle(fn: () => void): void {
    if (this.#inFlight === 0) fn();
    else this.#idle.push(fn);
  }

  closeAll(): void {
    for (const handle of this.#handles.values()) handle.dispose();
    this.#handles.clear();
  }

  #status(reqId: number, error: FsError | null): void {
    if (!error) return void this.sftp.status(reqId, STATUS_CODE.OK);
    const code =
      error.kind === 'no_such_file'
        ? STATUS_CODE.NO_SUCH_FILE
        : error.kind === 'permission_denied'
          ? STATUS_CODE.PERMISSION_DENIED
          : STATUS_CODE.FAILURE;
    this.sftp.status(reqId, code, error.reason);
  }

  #bind(): void {
    const sftp = this.sftp;
    const fs = this.fs;
    const on = (event: string, fn: (reqId: number, ...args: never[]) => Promise<void>) => {
      sftp.on(event, (reqId: number, ...args: never[]) => {
        this.#inFlight++;
        fn(reqId, ...args)
          .catch((error: unknown) => {
            if (error instanceof ReadError) return this.#status(reqId, error.error);
            this.logger.warn({ err: error, op: event }, 'sftp request failed');
            try {
              sftp.status(reqId, STATUS_CODE.FAILURE, (error as Error).message);
            } catch {
              // channel gone
            }
          })
          .finally(() => {
            this.#inFlight--;
            if (this.#inFlight === 0) for (const wake of this.#idle.splice(0)) wake();
          });
      });
    };
    const handleOf = (raw: Buffer) => this.#handles.get(raw.toString());

    on('REALPATH', async (reqId, path: string) => {
      const resolved = await fs.resolve(path);
      sftp.name(reqId, [{ filename: resolved, longname: resolved, attrs: {} as Attributes }]);
    });

    on('STAT', async (reqId, path: string) => this.#stat(reqId, await fs.resolve(path), true));
    on('LSTAT', async (reqId, path: string) => this.#stat(reqId, await fs.resolve(path), false));

    on('FSTAT', async (reqId, raw: Buffer) => {
      const handle = handleOf(raw);
      if (!handle) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      // The size and times must include every write acknowledged so far.
      if (handle instanceof FileHandle) await handle.settle();
      await this.#stat(reqId, handle.path, true);
    });

    on('OPEN', async (reqId, filename: string, flags: number, attrs: Attributes) => {
      const path = await fs.resolve(filename);
      const opened =
        flags & OPEN_MODE.WRITE ? await this.#openWrite(path, flags, attrs) : await this.#openRead(path);
      if (!opened.ok) return this.#status(reqId, opened.error);
      sftp.handle(reqId, Buffer.from(this.#register(opened.value)));
    });

    on('READ', async (reqId, raw: Buffer, offset: number, length: number) => {
      const handle = handleOf(raw);
      if (!(handle instanceof FileHandle) || !handle.readable)
        return sftp.status(reqId, STATUS_CODE.FAILURE, 'not open for reading');
      const data = await handle.read(offset, Math.min(length, MAX_READ_BYTES));
      if (data === null) return sftp.status(reqId, STATUS_CODE.EOF);
      sftp.data(reqId, data);
    });

    on('WRITE', async (reqId, raw: Buffer, offset: number, data: Buffer) => {
      const handle = handleOf(raw);
      if (!(handle instanceof FileHandle) || !handle.writer)
        return sftp.status(reqId, STATUS_CODE.FAILURE, 'not open for writing');
      this.#status(reqId, await handle.write(offset, data));
    });

    on('CLOSE', async (reqId, raw: Buffer) => {
      const id = raw.toString();
      const handle = this.#handles.get(id);
      if (!handle) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      this.#handles.delete(id);
      this.#status(reqId, await handle.close());
    });

    on('OPENDIR', async (reqId, path: string) => {
      const dir = await fs.resolve(path);
      const listed = await fs.list(dir);
      if (!listed.ok) return this.#status(reqId, listed.error);
      sftp.handle(reqId, Buffer.from(this.#register(new DirHandle(dir, listed.value))));
    });

    on('READDIR', async (reqId, raw: Buffer) => {
      const handle = handleOf(raw);
      if (!(handle instanceof DirHandle))
        return sftp.status(reqId, STATUS_CODE.FAILURE, 'not a directory handle');
      const batch = handle.next(200);
      if (batch.length === 0) return sftp.status(reqId, STATUS_CODE.EOF);
      sftp.name(reqId, batch);
    });

    const simple = (event: string, script: string) =>
      on(event, async (reqId, ...raw: string[]) => {
        const paths = await Promise.all(raw.map((p) => fs.resolve(p)));
        this.#status(reqId, await fs.run(script, paths));
      });
    simple(
      'REMOVE',
      '[ -d "$1" ] && [ ! -L "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }; rm -f -- "$1"',
    );
    simple('RMDIR', 'rmdir -- "$1"');
    // SFTP v3 rename refuses an existing target (posix-rename@openssh.com would replace it).
    simple(
      'RENAME',
      '[ -e "$2" ] || [ -L "$2" ] && { echo "$2: File exists" >&2; exit 1; }; mv -f -- "$1" "$2"',
    );

    on('MKDIR', async (reqId, path: string, attrs: Attributes) => {
      const mode = attrs?.mode !== undefined ? (attrs.mode & 0o7777).toString(8) : '755';
      this.#status(reqId, await fs.run('mkdir -m "$2" -- "$1"', [await fs.resolve(path), mode]));
    });

    on('SETSTAT', async (reqId, path: string, attrs: Attributes) =>
      this.#setstat(reqId, await fs.resolve(path), attrs),
    );
    on('FSETSTAT', async (reqId, raw: Buffer, attrs: Attributes) => {
      const handle = handleOf(raw);
      if (!handle) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      // Times set now must not be bumped by writes still on their way to the file.
      if (handle instanceof FileHandle) await handle.settle();
      await this.#setstat(reqId, handle.path, attrs);
    });

    on('READLINK', async (reqId, path: string) => {
      const result = await fs.exec.run('readlink -- "$1"', [await fs.resolve(path)]);
      if (result.code !== 0) return this.#status(reqId, errorOf(result.stderr, result.code));
      const target = result.stdout.toString('utf8').replace(/\n$/, '');
      sftp.name(reqId, [{ filename: target, longname: target, attrs: {} as Attributes }]);
    });

    // OpenSSH's client sends SYMLINK with its two arguments swapped relative to the draft (see its
    // PROTOCOL file); ssh2 passes them in wire order, so the first is the link's target as OpenSSH means it.
    on('SYMLINK', async (reqId, first: string, second: string) => {
      this.#status(reqId, await fs.run('ln -s -- "$1" "$2"', [first, await fs.resolve(second)]));
    });

    on('EXTENDED', async (reqId) => {
      sftp.status(reqId, STATUS_CODE.OP_UNSUPPORTED, 'extension not supported');
    });
  }

  async #openRead(path: string): Promise<FsResult<Handle>> {
    const started = await ReadAhead.start((offset) => this.fs.openRead(path, offset));
    return started.ok ? { ok: true, value: new FileHandle(this.fs, path, started.value, null) } : started;
  }

  async #openWrite(path: string, flags: number, attrs: Attributes): Promise<FsResult<Handle>> {
    const append = (flags & OPEN_MODE.APPEND) !== 0;
    const opened = await this.fs.openWrite(path, {
      create: (flags & OPEN_MODE.CREAT) !== 0,
      exclusive: (flags & OPEN_MODE.EXCL) !== 0,
      truncate: (flags & OPEN_MODE.TRUNC) !== 0,
      append,
      mode: attrs?.mode !== undefined ? attrs.mode : null,
    });
    if (!opened.ok) return opened;
    const writer = new FileWriter(this.fs, path, opened.value, append);
    return { ok: true, value: new FileHandle(this.fs, path, (flags & OPEN_MODE.READ) !== 0, writer) };
  }

  #register(handle: Handle): string {
    const id = String(this.#nextHandle++);
    this.#handles.set(id, handle);
    return id;
  }

  async #stat(reqId: number, path: string, follow: boolean): Promise<void> {
    const stat = await this.fs.stat(path, follow);
    if (!stat.ok) return this.#status(reqId, stat.error);
    this.sftp.attrs(reqId, toAttributes(stat.value));
  }

  async #setstat(reqId: number, path: string, attrs: Attributes): Promise<void> {
    const { mode, uid, gid, size, atime, mtime } = attrs;
    this.#status(
      reqId,
      await this.fs.setAttrs(path, {
        ...(mode !== undefined ? { mode } : {}),
        ...(uid !== undefined && gid !== undefined ? { uid, gid } : {}),
        ...(size !== undefined ? { size } : {}),
        ...(atime !== undefined ? { atime: Number(atime) } : {}),
        ...(mtime !== undefined ? { mtime: Number(mtime) } : {}),
      }),
    );
  }
}

function toAttributes(attrs: FileAttrs): Attributes {
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

  async read(offset: number, length: number): Promise<Buffer | null> {
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
  readonly #entries: FileEntry[];
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
  next(count: number): FileEntry[] {
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

import { posix } from 'node:path';
import type { Logger } from 'pino';
import ssh2, { type Attributes, type FileEntry, type SFTPWrapper } from 'ssh2';
import type { ExecSession } from '../tunnels/types.ts';
import { type ContainerExec, finished } from './container-exec.ts';

const { OPEN_MODE, STATUS_CODE } = ssh2.utils.sftp;

/** Out-of-order writes held back until the gap before them is filled; beyond this the write fails. */
const MAX_PENDING_WRITE_BYTES = 64 * 1024 * 1024;
/** Read-ahead from `cat` held in memory before the exec's output is paused. */
const READ_AHEAD_BYTES = 4 * 1024 * 1024;
/** A READ this far ahead of the stream is served by reading on (skipping); farther, by restarting at the offset. */
const MAX_SKIP_BYTES = 1024 * 1024;

/**
 * The SFTP server side, backed by commands run in the container: images have no sftp-server, only a
 * POSIX shell and coreutils (busybox is enough: sh, cat, tail, stat, mkdir, rmdir, rm, mv, chmod, touch,
 * readlink, ln). A file open for writing is one `cat` fed by WRITE requests in offset order; a file open
 * for reading is one `cat` (or `tail -c +N` after a seek) read ahead with back-pressure; metadata
 * requests are one short exec each. Paths are resolved against the login user's home directory.
 */
export class SftpBackend {
  readonly #handles = new Map<string, Handle>();
  #nextHandle = 1;
  #home: Promise<string>;

  constructor(
    private readonly sftp: SFTPWrapper,
    private readonly exec: ContainerExec,
    private readonly logger: Logger,
  ) {
    this.#home = exec
      .run('cd 2>/dev/null || cd /; pwd')
      .then((r) => r.stdout.toString('utf8').trim() || '/')
      .catch(() => '/');
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

  #inFlight = 0;
  #idle: (() => void)[] = [];

  #whenIdle(fn: () => void): void {
    if (this.#inFlight === 0) fn();
    else this.#idle.push(fn);
  }

  closeAll(): void {
    for (const handle of this.#handles.values()) handle.dispose();
    this.#handles.clear();
  }

  async #path(path: string): Promise<string> {
    return posix.resolve(await this.#home, path === '' ? '.' : path);
  }

  #bind(): void {
    const sftp = this.sftp;
    const on = (event: string, fn: (reqId: number, ...args: never[]) => Promise<void>) => {
      sftp.on(event, (reqId: number, ...args: never[]) => {
        this.#inFlight++;
        fn(reqId, ...args)
          .catch((error: unknown) => {
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

    on('REALPATH', async (reqId, path: string) => {
      const resolved = await this.#path(path);
      sftp.name(reqId, [{ filename: resolved, longname: resolved, attrs: {} as Attributes }]);
    });

    on('STAT', async (reqId, path: string) => this.#stat(reqId, await this.#path(path), true));
    on('LSTAT', async (reqId, path: string) => this.#stat(reqId, await this.#path(path), false));

    on('FSTAT', async (reqId, raw: Buffer) => {
      const handle = this.#handles.get(raw.toString());
      if (!handle) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      if (handle instanceof WriteHandle) await handle.flushed();
      await this.#stat(reqId, handle.path, true);
    });

    on('OPEN', async (reqId, filename: string, flags: number, attrs: Attributes) => {
      const path = await this.#path(filename);
      const handle =
        flags & OPEN_MODE.WRITE
          ? await WriteHandle.open(this.exec, path, flags, attrs)
          : await ReadHandle.open(this.exec, path);
      if ('error' in handle) return sftp.status(reqId, handle.error.code, handle.error.message);
      this.#handles.set(this.#register(handle.value), handle.value);
      sftp.handle(reqId, Buffer.from(handle.value.id));
    });

    on('READ', async (reqId, raw: Buffer, offset: number, length: number) => {
      const handle = this.#handles.get(raw.toString());
      if (!(handle instanceof ReadHandle))
        return sftp.status(reqId, STATUS_CODE.FAILURE, 'not open for reading');
      const data = await handle.read(offset, length);
      if (data === null) return sftp.status(reqId, STATUS_CODE.EOF);
      sftp.data(reqId, data);
    });

    on('WRITE', async (reqId, raw: Buffer, offset: number, data: Buffer) => {
      const handle = this.#handles.get(raw.toString());
      if (!(handle instanceof WriteHandle))
        return sftp.status(reqId, STATUS_CODE.FAILURE, 'not open for writing');
      const error = await handle.write(offset, data);
      if (error) return sftp.status(reqId, error.code, error.message);
      sftp.status(reqId, STATUS_CODE.OK);
    });

    on('CLOSE', async (reqId, raw: Buffer) => {
      const id = raw.toString();
      const handle = this.#handles.get(id);
      if (!handle) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      this.#handles.delete(id);
      const error = await handle.close();
      if (error) return sftp.status(reqId, error.code, error.message);
      sftp.status(reqId, STATUS_CODE.OK);
    });

    on('OPENDIR', async (reqId, path: string) => {
      const dir = await this.#path(path);
      const result = await this.exec.run(LIST_SCRIPT, [dir]);
      if (result.code !== 0) {
        const error = statusOf(result.stderr, result.code);
        return sftp.status(reqId, error.code, error.message);
      }
      const handle = new DirHandle('', dir, parseListing(result.stdout));
      this.#handles.set(this.#register(handle), handle);
      sftp.handle(reqId, Buffer.from(handle.id));
    });

    on('READDIR', async (reqId, raw: Buffer) => {
      const handle = this.#handles.get(raw.toString());
      if (!(handle instanceof DirHandle))
        return sftp.status(reqId, STATUS_CODE.FAILURE, 'not a directory handle');
      const batch = handle.next(200);
      if (batch.length === 0) return sftp.status(reqId, STATUS_CODE.EOF);
      sftp.name(reqId, batch);
    });

    const simple = (event: string, script: string, argsOf: (...paths: string[]) => string[]) =>
      on(event, async (reqId, ...raw: string[]) => {
        const paths = await Promise.all(raw.map((p) => this.#path(p)));
        const result = await this.exec.run(script, argsOf(...paths));
        const error = result.code === 0 ? null : statusOf(result.stderr, result.code);
        sftp.status(reqId, error?.code ?? STATUS_CODE.OK, error?.message);
      });
    simple(
      'REMOVE',
      '[ -d "$1" ] && [ ! -L "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }; rm -f -- "$1"',
      (p) => [p],
    );
    simple('RMDIR', 'rmdir -- "$1"', (p) => [p]);
    // SFTP v3 rename refuses an existing target (posix-rename@openssh.com would replace it).
    simple(
      'RENAME',
      '[ -e "$2" ] || [ -L "$2" ] && { echo "$2: File exists" >&2; exit 1; }; mv -f -- "$1" "$2"',
      (a, b) => [a, b],
    );

    on('MKDIR', async (reqId, path: string, attrs: Attributes) => {
      const mode = attrs?.mode !== undefined ? (attrs.mode & 0o7777).toString(8) : '755';
      const result = await this.exec.run('mkdir -m "$2" -- "$1"', [await this.#path(path), mode]);
      const error = result.code === 0 ? null : statusOf(result.stderr, result.code);
      sftp.status(reqId, error?.code ?? STATUS_CODE.OK, error?.message);
    });

    on('SETSTAT', async (reqId, path: string, attrs: Attributes) =>
      this.#setstat(reqId, await this.#path(path), attrs),
    );
    on('FSETSTAT', async (reqId, raw: Buffer, attrs: Attributes) => {
      const handle = this.#handles.get(raw.toString());
      if (!handle) return sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      if (handle instanceof WriteHandle) await handle.flushed();
      await this.#setstat(reqId, handle.path, attrs);
    });

    on('READLINK', async (reqId, path: string) => {
      const result = await this.exec.run('readlink -- "$1"', [await this.#path(path)]);
      if (result.code !== 0) {
        const error = statusOf(result.stderr, result.code);
        return sftp.status(reqId, error.code, error.message);
      }
      const target = result.stdout.toString('utf8').replace(/\n$/, '');
      sftp.name(reqId, [{ filename: target, longname: target, attrs: {} as Attributes }]);
    });

    // OpenSSH's client sends SYMLINK with its two arguments swapped relative to the draft (see its
    // PROTOCOL file); ssh2 passes them in wire order, so the first is the link's target as OpenSSH means it.
    on('SYMLINK', async (reqId, first: string, second: string) => {
      const result = await this.exec.run('ln -s -- "$1" "$2"', [first, await this.#path(second)]);
      const error = result.code === 0 ? null : statusOf(result.stderr, result.code);
      sftp.status(reqId, error?.code ?? STATUS_CODE.OK, error?.message);
    });

    on('EXTENDED', async (reqId) => {
      sftp.status(reqId, STATUS_CODE.OP_UNSUPPORTED, 'extension not supported');
    });
  }

  #register(handle: Handle): string {
    handle.id = String(this.#nextHandle++);
    return handle.id;
  }

  async #stat(reqId: number, path: string, follow: boolean): Promise<void> {
    const result = await this.exec.run(`stat ${follow ? '-L ' : ''}-c '${STAT_FORMAT}' -- "$1"`, [path]);
    if (result.code !== 0) {
      const error = statusOf(result.stderr, result.code);
      return this.sftp.status(reqId, error.code, error.message);
    }
    const attrs = parseStat(result.stdout.toString('utf8').trim());
    if (!attrs) return this.sftp.status(reqId, STATUS_CODE.FAILURE, 'unreadable stat output');
    this.sftp.attrs(reqId, attrs.attrs);
  }

  async #setstat(reqId: number, path: string, attrs: Attributes): Promise<void> {
    const steps: string[] = [];
    const args = [path];
    if (attrs.mode !== undefined) {
      args.push((attrs.mode & 0o7777).toString(8));
      steps.push(`chmod "$${args.length}" -- "$1"`);
    }
    if (attrs.uid !== undefined && attrs.gid !== undefined) {
      args.push(`${attrs.uid}:${attrs.gid}`);
      steps.push(`chown "$${args.length}" -- "$1"`);
    }
    if (attrs.size !== undefined) {
      args.push(String(attrs.size));
      steps.push(`truncate -s "$${args.length}" -- "$1"`);
    }
    if (attrs.mtime !== undefined) {
      args.push(`@${Math.floor(Number(attrs.mtime))}`);
      steps.push(`touch -c -d "$${args.length}" -- "$1"`);
    }
    if (steps.length === 0) return this.sftp.status(reqId, STATUS_CODE.OK);
    const result = await this.exec.run(steps.join(' && '), args);
    const error = result.code === 0 ? null : statusOf(result.stderr, result.code);
    this.sftp.status(reqId, error?.code ?? STATUS_CODE.OK, error?.message);
  }
}

interface SftpError {
  code: number;
  message: string;
}

type Opened<T> = { value: T } | { error: SftpError };

interface Handle {
  id: string;
  readonly path: string;
  close(): Promise<SftpError | null>;
  dispose(): void;
}

/** %f raw mode (hex), size, uid, gid, atime, mtime, links. */
const STAT_FORMAT = '%f %s %u %g %X %Y %h';

// One record per entry: stat fields, then the name. `.*` also matches . and .. (listed, as sshd does).
const LIST_SCRIPT = `cd -- "$1" || exit 1
for f in .* *; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  printf '%s/' "$(stat -c '${STAT_FORMAT}' -- "$f")"
  printf '%s\\0' "$f"
done`;

function parseStat(line: string): { attrs: Attributes; nlink: number } | null {
  const parts = line.split(' ');
  if (parts.length < 7) return null;
  const [mode, size, uid, gid, atime, mtime, nlink] = parts;
  return {
    attrs: {
      mode: Number.parseInt(mode!, 16),
      size: Number(size),
      uid: Number(uid),
      gid: Number(gid),
      atime: Number(atime),
      mtime: Number(mtime),
    },
    nlink: Number(nlink),
  };
}

function parseListing(out: Buffer): FileEntry[] {
  const entries: FileEntry[] = [];
  for (const record of out.toString('utf8').split('\0')) {
    const slash = record.indexOf('/');
    if (slash < 0) continue;
    const stat = parseStat(record.slice(0, slash));
    const filename = record.slice(slash + 1);
    if (!stat || filename === '') continue;
    entries.push({ filename, longname: longname(filename, stat.attrs, stat.nlink), attrs: stat.attrs });
  }
  return entries;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** The `ls -l` line sftp's `ls -l` prints. */
function longname(name: string, attrs: Attributes, nlink: number): string {
  const type = attrs.mode & 0o170000;
  const kind =
    type === 0o040000
      ? 'd'
      : type === 0o120000
        ? 'l'
        : type === 0o020000
          ? 'c'
          : type === 0o060000
            ? 'b'
            : type === 0o010000
              ? 'p'
              : type === 0o140000
                ? 's'
                : '-';
  const rwx = (bits: number) => `${bits & 4 ? 'r' : '-'}${bits & 2 ? 'w' : '-'}${bits & 1 ? 'x' : '-'}`;
  const perms = `${kind}${rwx(attrs.mode >> 6)}${rwx(attrs.mode >> 3)}${rwx(attrs.mode)}`;
  const date = new Date(attrs.mtime * 1000);
  const when = `${MONTHS[date.getUTCMonth()]} ${String(date.getUTCDate()).padStart(2)} ${String(date.getUTCHours()).padStart(2, '0')}:${String(date.getUTCMinutes()).padStart(2, '0')}`;
  return `${perms} ${String(nlink).padStart(4)} ${String(attrs.uid).padEnd(8)} ${String(attrs.gid).padEnd(8)} ${String(attrs.size).padStart(8)} ${when} ${name}`;
}

/** Maps a failed command's message to an SFTP status. */
function statusOf(stderr: string, code: number | null): SftpError {
  const message =
    stderr
      .trim()
      .split('\n')
      .pop()
      ?.replace(/^[^:]*: /, '') || `command failed (exit ${code})`;
  if (/no such file|not found|can't cd|can't open/i.test(stderr))
    return { code: STATUS_CODE.NO_SUCH_FILE, message };
  if (/permission denied|read-only|operation not permitted/i.test(stderr)) {
    return { code: STATUS_CODE.PERMISSION_DENIED, message };
  }
  return { code: STATUS_CODE.FAILURE, message };
}

class DirHandle implements Handle {
  #offset = 0;
  constructor(
    public id: string,
    readonly path: string,
    private readonly entries: FileEntry[],
  ) {}
  next(count: number): FileEntry[] {
    const batch = this.entries.slice(this.#offset, this.#offset + count);
    this.#offset += batch.length;
    return batch;
  }
  async close() {
    return null;
  }
  dispose() {}
}

/** Waits for the first line the script prints once its file is open ("ok"), or its failure. */
async function opened(session: ExecSession): Promise<{ rest: Buffer } | { error: SftpError }> {
  const stderr: Buffer[] = [];
  session.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
  return new Promise((resolve) => {
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.length < 3) return;
      session.stdout.off('data', onData);
      session.stdout.pause();
      if (head.subarray(0, 3).toString() === 'ok\n') resolve({ rest: head.subarray(3) });
      else resolve({ error: { code: STATUS_CODE.FAILURE, message: 'unexpected output opening the file' } });
    };
    session.stdout.on('data', onData);
    // Only once stdout is drained: a short file's "ok" and content may still be on their way.
    session.exit.then(async ({ code }) => {
      await Promise.all([finished(session.stdout), finished(session.stderr)]);
      session.stdout.off('data', onData);
      resolve({ error: statusOf(Buffer.concat(stderr).toString('utf8'), code) });
    });
  });
}

// Opens the file on fd 3 first, so a bad path fails the OPEN request itself; then streams.
const READ_SCRIPT = `exec 3<"$1" || exit 1
[ -d "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }
echo ok
if [ "$2" -le 1 ]; then exec cat <&3; else exec tail -c +"$2" <&3; fi`;

class ReadHandle implements Handle {
  id = '';
  #session: ExecSession | null = null;
  /** File offset of the first byte in #chunks. */
  #position = 0;
  #chunks: Buffer[] = [];
  #buffered = 0;
  #ended = false;
  #waiters: (() => void)[] = [];
  #queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly exec: ContainerExec,
    readonly path: string,
  ) {}

  static async open(exec: ContainerExec, path: string): Promise<Opened<ReadHandle>> {
    const handle = new ReadHandle(exec, path);
    const error = await handle.#start(0);
    return error ? { error } : { value: handle };
  }

  async #start(offset: number): Promise<SftpError | null> {
    this.#stop();
    const session = await this.exec.open(READ_SCRIPT, [this.path, String(offset + 1)]);
    session.stdin.end();
    const result = await opened(session);
    if ('error' in result) {
      session.close();
      return result.error;
    }
    this.#session = session;
    this.#position = offset;
    this.#chunks = result.rest.length > 0 ? [result.rest] : [];
    this.#buffered = result.rest.length;
    this.#ended = false;
    session.stdout.on('data', (chunk: Buffer) => {
      if (this.#session !== session) return;
      this.#chunks.push(chunk);
      this.#buffered += chunk.length;
      if (this.#buffered >= READ_AHEAD_BYTES) session.stdout.pause();
      this.#wake();
    });
    const end = () => {
      if (this.#session !== session) return;
      this.#ended = true;
      this.#wake();
    };
    session.stdout.once('end', end);
    session.stdout.once('close', end);
    session.stdout.once('error', end);
    session.stdout.resume();
    return null;
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  #take(length: number): Buffer {
    const out: Buffer[] = [];
    let need = length;
    while (need > 0 && this.#chunks.length > 0) {
      const head = this.#chunks[0]!;
      if (head.length <= need) {
        out.push(head);
        this.#chunks.shift();
        need -= head.length;
      } else {
        out.push(head.subarray(0, need));
        this.#chunks[0] = head.subarray(need);
        need = 0;
      }
    }
    const data = out.length === 1 ? out[0]! : Buffer.concat(out);
    this.#position += data.length;
    this.#buffered -= data.length;
    if (this.#buffered < READ_AHEAD_BYTES / 2) this.#session?.stdout.resume();
    return data;
  }

  /** Requests are served one after another, in arrival order: the client pipelines them in offset order. */
  read(offset: number, length: number): Promise<Buffer | null> {
    const next = this.#queue.then(() => this.#read(offset, length));
    this.#queue = next.catch(() => {});
    return next;
  }

  async #read(offset: number, length: number): Promise<Buffer | null> {
    if (offset < this.#position || offset > this.#position + this.#buffered + MAX_SKIP_BYTES) {
      const error = await this.#start(offset);
      if (error) throw new Error(error.message);
    }
    // Skip forward to the offset, then gather up to `length` bytes (less at the end of the file).
    while (true) {
      const skip = offset - this.#position;
      if (skip > 0 && this.#buffered > 0) {
        this.#take(Math.min(skip, this.#buffered));
        continue;
      }
      if (skip === 0 && (this.#buffered >= length || (this.#ended && this.#buffered > 0))) {
        return this.#take(Math.min(length, this.#buffered));
      }
      if (this.#ended) return null;
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  #stop(): void {
    this.#session?.close();
    this.#session = null;
  }

  async close() {
    this.#stop();
    return null;
  }

  dispose() {
    this.#stop();
  }
}

/** Builds the open script for OPEN flags: create/exclusive/truncate/append checked before streaming. */
function writeScript(flags: number): string {
  const lines: string[] = [];
  if (flags & OPEN_MODE.EXCL)
    lines.push('[ -e "$1" ] || [ -L "$1" ] && { echo "$1: File exists" >&2; exit 1; }');
  if (!(flags & OPEN_MODE.CREAT))
    lines.push('[ -e "$1" ] || { echo "$1: No such file or directory" >&2; exit 1; }');
  lines.push('[ -d "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }');
  lines.push('[ -e "$1" ] && new=0 || new=1');
  if (flags & OPEN_MODE.APPEND) lines.push('exec 3>>"$1" || exit 1');
  else if (flags & OPEN_MODE.TRUNC) lines.push('exec 3>"$1" || exit 1');
  // Neither: open read-write, so the file is not truncated and writing starts at offset 0.
  else lines.push('exec 3<>"$1" || exit 1');
  lines.push('[ "$new" = 1 ] && [ -n "$2" ] && chmod "$2" -- "$1"');
  lines.push('echo ok');
  lines.push('exec cat >&3');
  return lines.join('\n');
}

class WriteHandle implements Handle {
  id = '';
  /** Next file offset `cat` will write. */
  #position = 0;
  #pending = new Map<number, { data: Buffer; done: (error: SftpError | null) => void }>();
  #pendingBytes = 0;
  #failed: SftpError | null = null;
  #inFlight = 0;
  #idle: (() => void)[] = [];
  readonly #stderr: Buffer[] = [];

  private constructor(
    private readonly session: ExecSession,
    readonly path: string,
    private readonly append: boolean,
  ) {
    session.stderr.on('data', (chunk: Buffer) => this.#stderr.push(chunk));
    session.stdout.resume();
    session.stdin.on('error', (error: Error) => {
      this.#failed ??= { code: STATUS_CODE.FAILURE, message: error.message };
    });
    session.exit.then(({ code }) => {
      if (code !== 0) this.#failed ??= statusOf(Buffer.concat(this.#stderr).toString('utf8'), code);
    });
  }

  static async open(
    exec: ContainerExec,
    path: string,
    flags: number,
    attrs: Attributes,
  ): Promise<Opened<WriteHandle>> {
    const mode = attrs?.mode !== undefined ? (attrs.mode & 0o7777).toString(8) : '';
    const session = await exec.open(writeScript(flags), [path, mode]);
    const result = await opened(session);
    if ('error' in result) {
      session.close();
      return { error: result.error };
    }
    return { value: new WriteHandle(session, path, (flags & OPEN_MODE.APPEND) !== 0) };
  }

  /**
   * Writes arrive pipelined and normally in order; one that is ahead of the stream waits for the gap to
   * be filled. Rewriting bytes already written is not possible through `cat` and fails.
   */
  write(offset: number, data: Buffer): Promise<SftpError | null> {
    if (this.#failed) return Promise.resolve(this.#failed);
    if (this.append) offset = this.#position;
    if (offset < this.#position) {
      return Promise.resolve({
        code: STATUS_CODE.OP_UNSUPPORTED,
        message: 'writes must move forward through the file',
      });
    }
    return new Promise((resolve) => {
      if (offset > this.#position) {
        if (this.#pendingBytes + data.length > MAX_PENDING_WRITE_BYTES || this.#pending.has(offset)) {
          resolve({ code: STATUS_CODE.OP_UNSUPPORTED, message: 'writes too far out of order' });
          return;
        }
        this.#pending.set(offset, { data, done: resolve });
        this.#pendingBytes += data.length;
        return;
      }
      this.#emit(data, resolve);
      // Drain what became contiguous.
      let next = this.#pending.get(this.#position);
      while (next) {
        this.#pending.delete(this.#position);
        this.#pendingBytes -= next.data.length;
        this.#emit(next.data, next.done);
        next = this.#pending.get(this.#position);
      }
    });
  }

  #emit(data: Buffer, done: (error: SftpError | null) => void): void {
    this.#position += data.length;
    this.#inFlight++;
    this.session.stdin.write(data, (error) => {
      this.#inFlight--;
      if (error) this.#failed ??= { code: STATUS_CODE.FAILURE, message: error.message };
      done(error ? this.#failed : null);
      if (this.#inFlight === 0) {
        const idle = this.#idle;
        this.#idle = [];
        for (const wake of idle) wake();
      }
    });
  }

  /** Settles once every accepted write reached the process. */
  flushed(): Promise<void> {
    if (this.#inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  async close(): Promise<SftpError | null> {
    for (const { done } of this.#pending.values())
      done({ code: STATUS_CODE.FAILURE, message: 'gap left in the file' });
    const gap = this.#pending.size > 0;
    this.#pending.clear();
    await this.flushed();
    this.session.stdin.end();
    const { code } = await this.session.exit;
    await finished(this.session.stderr);
    if (gap) return { code: STATUS_CODE.FAILURE, message: 'file closed with a gap left by missing writes' };
    if (code !== 0) return this.#failed ?? statusOf(Buffer.concat(this.#stderr).toString('utf8'), code);
    return this.#failed;
  }

  dispose(): void {
    this.session.close();
  }
}

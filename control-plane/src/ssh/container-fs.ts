import { posix } from 'node:path';
import type { ExecSession } from '../fleet/tunnels/types.ts';
import { type ContainerExec, finished } from './container-exec.ts';

/**
 * Files inside a container, for SFTP and SCP: images have no sftp-server or scp, only a POSIX shell and
 * its tools (busybox is enough: sh, cat, dd, stat, mkdir, rmdir, rm, mv, chmod, chown, truncate, touch,
 * readlink, ln). Each operation is one short script (in the session's helper shell once ContainerExec is
 * prepared, else an exec of its own); file contents stream through long-lived `cat`/`dd` processes.
 */

/** A failed operation: what kind (for SFTP status codes) and the reason as strerror words it. */
export interface FsError {
  kind: 'no_such_file' | 'permission_denied' | 'failure';
  /** "No such file or directory", "Is a directory", or the tool's own last line. */
  reason: string;
}

export interface FileAttrs {
  /** st_mode: type and permission bits. */
  mode: number;
  size: number;
  uid: number;
  gid: number;
  atime: number;
  mtime: number;
  nlink: number;
}

export interface DirEntry {
  name: string;
  attrs: FileAttrs;
}

export type FsResult<T> = { ok: true; value: T } | { ok: false; error: FsError };

export const S_IFMT = 0o170000;
export const S_IFDIR = 0o040000;
export const S_IFREG = 0o100000;
export const S_IFLNK = 0o120000;

export const isDirectory = (attrs: FileAttrs) => (attrs.mode & S_IFMT) === S_IFDIR;
export const isRegularFile = (attrs: FileAttrs) => (attrs.mode & S_IFMT) === S_IFREG;
export const isSymlink = (attrs: FileAttrs) => (attrs.mode & S_IFMT) === S_IFLNK;

/** %f raw mode (hex), size, uid, gid, atime, mtime, links. */
const STAT_FORMAT = '%f %s %u %g %X %Y %h';

// One record per entry: stat fields, then the name. `.*` also matches . and .. (listed, as sshd does).
const LIST_SCRIPT = `cd -- "$1" || exit 1
for f in .* *; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  printf '%s/' "$(stat -c '${STAT_FORMAT}' -- "$f")"
  printf '%s\\0' "$f"
done`;

// Opens the file on fd 3 first, so a bad path fails before anything streams; the first line is
// "ok <stat>". A start past 0 is a seek of fd 3 (dd with count=0 only moves the shared offset: busybox
// `tail -c +N` reads through to N, and breaks beyond 2 GiB), then cat streams from there.
const READ_SCRIPT = `exec 3<"$1" || exit 1
[ -d "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }
echo "ok $(stat -L -c '${STAT_FORMAT}' -- "$1")"
if [ "$2" -gt 0 ]; then dd bs=1 count=0 skip="$2" iflag=skip_bytes status=none <&3 || exit 1; fi
exec cat <&3`;

/** How a file is opened for writing (the SFTP OPEN flags, which SCP's sink also maps to). */
export interface WriteOpenOptions {
  create: boolean;
  exclusive: boolean;
  truncate: boolean;
  append: boolean;
  /** Permission bits for a file this creates (octal digits), or null for the default. */
  mode: number | null;
}

/**
 * The open script for write options: create/exclusive/truncate/append checked before streaming. Truncate
 * and append stream through `cat`; otherwise the file keeps its contents and `dd` writes from offset $3
 * (it opens write-only without truncating, which no shell redirection does: `<>` needs read permission
 * and `>>` sends every write to the end).
 */
function writeScript(options: WriteOpenOptions): string {
  const lines: string[] = [];
  if (options.exclusive) lines.push('[ -e "$1" ] || [ -L "$1" ] && { echo "$1: File exists" >&2; exit 1; }');
  if (!options.create) lines.push('[ -e "$1" ] || { echo "$1: No such file or directory" >&2; exit 1; }');
  lines.push('[ -d "$1" ] && { echo "$1: Is a directory" >&2; exit 1; }');
  lines.push('[ -e "$1" ] && new=0 || new=1');
  // Opened before "ok", so a path that cannot be written fails the open itself.
  lines.push(options.truncate && !options.append ? 'exec 3>"$1" || exit 1' : 'exec 3>>"$1" || exit 1');
  // A new file gets the requested mode less the umask, as open(2) would give it.
  lines.push('[ "$new" = 1 ] && [ -n "$2" ] && chmod "$(printf \'%o\' $(( 0$2 & ~0$(umask) )))" -- "$1"');
  lines.push('echo ok');
  if (options.append || options.truncate) lines.push('exec cat >&3');
  else lines.push('exec dd of="$1" bs=65536 seek="$3" oflag=seek_bytes conv=notrunc status=none');
  return lines.join('\n');
}

export interface SetAttrs {
  mode?: number;
  uid?: number;
  gid?: number;
  size?: number;
  atime?: number;
  mtime?: number;
}

/** A file's contents streaming out of the container from `offset`, with the file's attributes at open. */
export interface FileReadStream {
  session: ExecSession;
  attrs: FileAttrs;
  /** Bytes of content that arrived with the first line. */
  head: Buffer;
}

/** A process writing what its stdin receives into a file, from the offset it was opened at. */
export interface FileWriteStream {
  session: ExecSession;
}

export class ContainerFs {
  #home: Promise<string> | null = null;

  constructor(readonly exec: ContainerExec) {}

  /** The login user's home directory (as sshd starts sessions there), else `/`. */
  home(): Promise<string> {
    this.#home ??= this.exec
      .run('cd 2>/dev/null || cd /; pwd')
      .then((r) => r.stdout.toString('utf8').trim() || '/')
      .catch(() => '/');
    return this.#home;
  }

  /** A client's path made absolute against the home directory. */
  async resolve(path: string): Promise<string> {
    return posix.resolve(await this.home(), path === '' ? '.' : path);
  }

  /**
   * Expands words as the login shell would (quotes, globs, `~`, variables), in the home directory:
   * the legacy scp protocol passes its paths unquoted to the remote shell.
   */
  async expand(words: string): Promise<FsResult<string[]>> {
    const result = await this.exec.run(
      `cd 2>/dev/null || cd /
eval "set -- $1" || exit 1
printf '%s\\0' "$PWD"
for a; do printf '%s\\0' "$a"; done`,
      [words],
    );
    if (result.code !== 0) return { ok: false, error: errorOf(result.stderr, result.code) };
    const [pwd, ...paths] = result.stdout.toString('utf8').split('\0').slice(0, -1);
    return { ok: true, value: paths.map((p) => posix.resolve(pwd || '/', p)) };
  }

  async stat(path: string, follow = true): Promise<FsResult<FileAttrs>> {
    const result = await this.exec.run(`stat ${follow ? '-L ' : ''}-c '${STAT_FORMAT}' -- "$1"`, [path]);
    if (result.code !== 0) return { ok: false, error: errorOf(result.stderr, result.code) };
    const attrs = parseStat(result.stdout.toString('utf8').trim());
    return attrs ? { ok: true, value: attrs } : { ok: false, error: unreadable('stat') };
  }

  /** A directory's entries with their attributes (symbolic links not followed), `.` and `..` included. */
  async list(dir: string): Promise<FsResult<DirEntry[]>> {
    const result = await this.exec.run(LIST_SCRIPT, [dir]);
    if (result.code !== 0) return { ok: false, error: errorOf(result.stderr, result.code) };
    return { ok: true, value: parseListing(result.stdout) };
  }

  /** Runs a short script on paths; success or the error it printed. */
  async run(script: string, args: string[]): Promise<FsError | null> {
    const result = await this.exec.run(script, args);
    return result.code === 0 ? null : errorOf(result.stderr, result.code);
  }

  /**
   * Makes a directory with `mode` (less the umask, as mkdir(2) does), or accepts an existing one
   * (changing its mode when `chmodExisting`); whether it made it.
   */
  async ensureDirectory(path: string, mode: number, chmodExisting: boolean): Promise<FsResult<boolean>> {
    const result = await this.exec.run(
      `if [ -d "$1" ]; then [ "$3" = 1 ] && chmod "$2" -- "$1"; exit 0; fi
[ -e "$1" ] && { echo "$1: Not a directory" >&2; exit 1; }
mkdir -m "$(printf '%o' $(( 0$2 & ~0$(umask) )))" -- "$1" && echo created`,
      [path, (mode & 0o7777).toString(8), chmodExisting ? '1' : '0'],
    );
    if (result.code !== 0) return { ok: false, error: errorOf(result.stderr, result.code) };
    return { ok: true, value: result.stdout.toString('utf8').trim() === 'created' };
  }

  /** Sets what is given of mode, owner, size and times (seconds since the epoch), in that order. */
  async setAttrs(path: string, attrs: SetAttrs): Promise<FsError | null> {
    const steps: string[] = [];
    const args = [path];
    const arg = (value: string) => {
      args.push(value);
      return `"$${args.length}"`;
    };
    if (attrs.mode !== undefined) steps.push(`chmod ${arg((attrs.mode & 0o7777).toString(8))} -- "$1"`);
    if (attrs.uid !== undefined && attrs.gid !== undefined) {
      steps.push(`chown ${arg(`${attrs.uid}:${attrs.gid}`)} -- "$1"`);
    }
    if (attrs.size !== undefined) steps.push(`truncate -s ${arg(String(attrs.size))} -- "$1"`);
    if (attrs.atime !== undefined) steps.push(`touch -c -a -d ${arg(`@${Math.floor(attrs.atime)}`)} -- "$1"`);
    if (attrs.mtime !== undefined) steps.push(`touch -c -m -d ${arg(`@${Math.floor(attrs.mtime)}`)} -- "$1"`);
    if (steps.length === 0) return null;
    return this.run(steps.join(' && '), args);
  }

  /** Starts streaming a file (not a directory) from `offset`; fails when it cannot be opened. */
  async openRead(path: string, offset = 0): Promise<FsResult<FileReadStream>> {
    const session = await this.exec.open(READ_SCRIPT, [path, String(offset)]);
    session.stdin.end();
    const first = await firstLine(session);
    if (!first.ok) {
      session.close();
      return first;
    }
    const attrs = first.value.line.startsWith('ok ') ? parseStat(first.value.line.slice(3)) : null;
    if (!attrs) {
      session.close();
      return { ok: false, error: unreadable('open') };
    }
    return { ok: true, value: { session, attrs, head: first.value.rest } };
  }

  /** Opens a file for writing per `options`; bytes written to the session's stdin land from offset 0. */
  async openWrite(path: string, options: WriteOpenOptions): Promise<FsResult<FileWriteStream>> {
    const mode = options.mode !== null ? (options.mode & 0o7777).toString(8) : '';
    return this.#startWriter(writeScript(options), [path, mode, '0']);
  }

  /** A writer at `offset` of a file, keeping its contents (a seek on an open SFTP handle). */
  async reopenWrite(path: string, offset: number): Promise<FsResult<FileWriteStream>> {
    const options = { create: true, exclusive: false, truncate: false, append: false, mode: null };
    return this.#startWriter(writeScript(options), [path, '', String(offset)]);
  }

  async #startWriter(script: string, args: string[]): Promise<FsResult<FileWriteStream>> {
    const session = await this.exec.open(script, args);
    const first = await firstLine(session);
    if (!first.ok || first.value.line !== 'ok') {
      session.close();
      return first.ok ? { ok: false, error: unreadable('open') } : first;
    }
    session.stdout.resume();
    return { ok: true, value: { session } };
  }
}

function unreadable(what: string): FsError {
  return { kind: 'failure', reason: `unexpected output from ${what} in the container` };
}

/**
 * Waits for the first line the script prints once its file is open, or for its failure. Output stays
 * paused after the line, so nothing of the content is lost before the caller listens.
 */
function firstLine(session: ExecSession): Promise<FsResult<{ line: string; rest: Buffer }>> {
  const stderr: Buffer[] = [];
  const onStderr = (chunk: Buffer) => stderr.push(chunk);
  session.stderr.on('data', onStderr);
  return new Promise((resolve) => {
    let head: Buffer = Buffer.alloc(0);
    let done = false;
    const onData = (chunk: Buffer) => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      const newline = head.indexOf(0x0a);
      if (newline < 0 && head.length < 4096) return;
      done = true;
      session.stdout.off('data', onData);
      session.stdout.pause();
      if (newline < 0) return resolve({ ok: false, error: unreadable('open') });
      resolve({
        ok: true,
        value: { line: head.subarray(0, newline).toString('utf8'), rest: head.subarray(newline + 1) },
      });
    };
    session.stdout.on('data', onData);
    // Only once stdout is drained: a short file's first line and content may still be on their way.
    session.exit.then(async ({ code }) => {
      await Promise.all([finished(session.stdout), finished(session.stderr)]);
      if (done) return;
      session.stdout.off('data', onData);
      resolve({ ok: false, error: errorOf(Buffer.concat(stderr).toString('utf8'), code) });
    });
  });
}

function parseStat(line: string): FileAttrs | null {
  const parts = line.split(' ');
  if (parts.length < 7) return null;
  const [mode, size, uid, gid, atime, mtime, nlink] = parts.map((p, i) =>
    i === 0 ? Number.parseInt(p, 16) : Number(p),
  );
  const attrs = {
    mode: mode!,
    size: size!,
    uid: uid!,
    gid: gid!,
    atime: atime!,
    mtime: mtime!,
    nlink: nlink!,
  };
  return Object.values(attrs).every(Number.isFinite) ? attrs : null;
}

function parseListing(out: Buffer): DirEntry[] {
  const entries: DirEntry[] = [];
  for (const record of out.toString('utf8').split('\0')) {
    const slash = record.indexOf('/');
    if (slash < 0) continue;
    const attrs = parseStat(record.slice(0, slash));
    const name = record.slice(slash + 1);
    if (!attrs || name === '') continue;
    entries.push({ name, attrs });
  }
  return entries;
}

/**
 * The strerror texts the tools print, recognised in their messages (busybox and coreutils word them
 * alike; busybox's shell says "nonexistent directory" for a missing parent), then the shapes of
 * messages that mean a missing path without saying why.
 */
const REASONS: [RegExp, string, FsError['kind']][] = [
  [/permission denied/i, 'Permission denied', 'permission_denied'],
  [/operation not permitted/i, 'Operation not permitted', 'permission_denied'],
  [/read-only file system/i, 'Read-only file system', 'permission_denied'],
  [/is a directory/i, 'Is a directory', 'failure'],
  [/not a directory/i, 'Not a directory', 'failure'],
  [/file exists/i, 'File exists', 'failure'],
  [/no space left on device/i, 'No space left on device', 'failure'],
  [/directory not empty/i, 'Directory not empty', 'failure'],
  [/no such file or directory|nonexistent directory/i, 'No such file or directory', 'no_such_file'],
  [/can't cd|can't open|not found/i, 'No such file or directory', 'no_such_file'],
];

/** Maps a failed command's message to an error. */
export function errorOf(stderr: string, code: number | null): FsError {
  for (const [pattern, reason, kind] of REASONS) if (pattern.test(stderr)) return { kind, reason };
  const last = stderr
    .trim()
    .split('\n')
    .pop()
    ?.replace(/^[^:]*: /, '');
  return { kind: 'failure', reason: last || `command failed (exit ${code})` };
}

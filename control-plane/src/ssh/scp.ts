import { posix } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { ExecSession } from '../fleet/tunnels/types.ts';
import type { Logger } from '../logger.ts';
import { ByteReader } from './byte-reader.ts';
import {
  type ContainerFs,
  type FileAttrs,
  type FileReadStream,
  type FsError,
  isDirectory,
  isRegularFile,
  isSymlink,
} from './container-fs.ts';
import { FileWriter } from './file-writer.ts';
import type { ScpCommand } from './scp-command.ts';

/** Longest path sent (PATH_MAX): deeper, a tree reached through links is cut off with an error. */
const MAX_PATH_BYTES = 4096;

/** Stops the transfer: the peer broke the protocol, went away, or sent a fatal error. */
class ScpAbort extends Error {}

/** The times a `T` record announced, applied to the next file or directory. */
interface Times {
  mtime: number;
  atime: number;
}

/**
 * The remote end of the legacy SCP protocol (`scp -O`, or an scp older than OpenSSH 9), served by the
 * relay over the container's files as SFTP is, so no scp binary is needed in the image. The client
 * runs `scp -f <paths>` to download (we are the source) or `scp -t <target>` to upload (we are the
 * sink). Records are text lines (`C<mode> <size> <name>`, `D<mode> 0 <name>`, `E`, `T<mtime> 0 <atime> 0`),
 * each answered by one byte: 0 for ok, 1 followed by a message line for an error, 2 for a fatal one.
 * The exit status is 1 when anything failed, as scp's is.
 */
export class ScpServer {
  readonly #in: ByteReader;
  #errors = 0;
  #closed = false;

  constructor(
    private readonly channel: Readable & Writable,
    private readonly fs: ContainerFs,
    private readonly command: ScpCommand,
    private readonly logger: Logger,
  ) {
    this.#in = new ByteReader(channel);
    channel.on('close', () => {
      this.#closed = true;
    });
  }

  /** Runs the transfer to its end; the exit status to report. */
  async run(): Promise<number> {
    try {
      if (this.command.role === 'source') await this.#source();
      else await this.#sink();
    } catch (error) {
      if (!(error instanceof ScpAbort)) throw error;
      this.logger.info({ reason: error.message }, 'scp transfer stopped');
      return 1;
    }
    return this.#errors > 0 ? 1 : 0;
  }

  // ---- both roles

  /** Reports an error the way scp does (`\1scp: ...`): the peer prints it and goes on. */
  async #error(message: string): Promise<void> {
    this.#errors++;
    this.logger.info({ message }, 'scp error reported');
    await this.#send(`\x01scp: ${message}\n`);
  }

  async #send(data: string | Buffer): Promise<void> {
    if (this.#closed) throw new ScpAbort('the channel closed');
    if (!this.channel.write(data)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          this.channel.off('drain', done);
          this.channel.off('close', done);
          resolve();
        };
        this.channel.on('drain', done);
        this.channel.on('close', done);
      });
    }
  }

  /** The peer's answer to a record: true for ok, false for an error it reported (counted). */
  async #response(): Promise<boolean> {
    const code = await this.#in.byte();
    if (code === null) throw new ScpAbort('the client went away');
    if (code === 0) return true;
    const message = await this.#in.line();
    if (code === 1) {
      this.#errors++;
      this.logger.info({ message }, 'scp client reported an error');
      return false;
    }
    throw new ScpAbort(`the client reported a fatal error: ${message ?? ''}`);
  }

  // ---- source: files out of the container (`scp -f`)

  async #source(): Promise<void> {
    const expanded = await this.fs.expand(this.command.words);
    // The client speaks first: a 0 when it is ready.
    if (!(await this.#response())) return;
    if (!expanded.ok) return this.#error(expanded.error.reason);
    for (const path of expanded.value) await this.#sendPath(path, null);
  }

  /** A file, or (with -r) a directory; `attrs` from a listing when known, links and top-level paths not. */
  async #sendPath(path: string, attrs: FileAttrs | null): Promise<void> {
    // Links are followed, as scp follows them: a link to a parent directory ends here, not in a loop.
    if (path.length > MAX_PATH_BYTES) return this.#error(`${path}: name too long`);
    if (attrs && isDirectory(attrs)) return this.#sendDirectory(path, attrs);
    if (attrs && !isRegularFile(attrs) && !isSymlink(attrs)) {
      return this.#error(`${path}: not a regular file`);
    }
    const opened = await this.fs.openRead(path);
    if (opened.ok) {
      if (!isRegularFile(opened.value.attrs)) {
        opened.value.session.close();
        return this.#error(`${path}: not a regular file`);
      }
      return this.#sendFile(path, opened.value);
    }
    if (opened.error.reason !== 'Is a directory') return this.#error(`${path}: ${opened.error.reason}`);
    const stat = await this.fs.stat(path);
    if (!stat.ok) return this.#error(`${path}: ${stat.error.reason}`);
    return this.#sendDirectory(path, stat.value);
  }

  async #sendFile(path: string, { session, attrs, head }: FileReadStream): Promise<void> {
    try {
      if (this.command.preserve && !(await this.#times(attrs))) return;
      await this.#send(`C${mode4(attrs.mode)} ${attrs.size} ${posix.basename(path)}\n`);
      if (!(await this.#response())) return;
      const sent = await this.#stream(session, head, attrs.size);
      if (sent.error) {
        // Keep the stream in step: the announced size goes out, zeros in place of what was missing.
        if (sent.sent < attrs.size) await this.#zeros(attrs.size - sent.sent);
        await this.#error(`${path}: ${sent.error}`);
      } else {
        await this.#send(Buffer.of(0));
      }
      await this.#response();
    } finally {
      session.close();
    }
  }

  /** Copies exactly `size` bytes of the file's stream to the channel; how many came, and why fewer. */
  async #stream(
    session: ExecSession,
    head: Buffer,
    size: number,
  ): Promise<{ sent: number; error: string | null }> {
    let sent = 0;
    const take = async (chunk: Buffer) => {
      const piece = chunk.length > size - sent ? chunk.subarray(0, size - sent) : chunk;
      sent += piece.length;
      if (piece.length > 0) await this.#send(piece);
    };
    if (head.length > 0) await take(head);
    const stderr: Buffer[] = [];
    session.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    const output = new ByteReader(session.stdout);
    // Reads what the file holds now; a file that grew is cut at the size announced.
    while (sent < size) {
      const ok = await output.bytes(Math.min(size - sent, 1024 * 1024), take);
      if (!ok) break;
    }
    if (sent === size) return { sent, error: null };
    const { code } = await session.exit;
    const reason = code !== 0 ? Buffer.concat(stderr).toString('utf8').trim() : '';
    return { sent, error: reason || 'file shrank while it was being sent' };
  }

  async #zeros(count: number): Promise<void> {
    const block = Buffer.alloc(Math.min(count, 64 * 1024));
    for (let left = count; left > 0; left -= block.length) {
      await this.#send(left >= block.length ? block : block.subarray(0, left));
    }
  }

  async #times(attrs: FileAttrs): Promise<boolean> {
    await this.#send(`T${attrs.mtime} 0 ${attrs.atime} 0\n`);
    return this.#response();
  }

  async #sendDirectory(path: string, attrs: FileAttrs): Promise<void> {
    if (!this.command.recursive) return this.#error(`${path}: not a regular file`);
    const listed = await this.fs.list(path);
    if (!listed.ok) return this.#error(`${path}: ${listed.error.reason}`);
    if (this.command.preserve && !(await this.#times(attrs))) return;
    await this.#send(`D${mode4(attrs.mode)} 0 ${posix.basename(path)}\n`);
    if (!(await this.#response())) return;
    for (const entry of listed.value) {
      if (entry.name === '.' || entry.name === '..') continue;
      await this.#sendPath(posix.join(path, entry.name), entry.attrs);
    }
    await this.#send('E\n');
    await this.#response();
  }

  // ---- sink: files into the container (`scp -t`)

  async #sink(): Promise<void> {
    const expanded = await this.fs.expand(this.command.words);
    if (!expanded.ok) return this.#fatal(expanded.error.reason);
    if (expanded.value.length !== 1) return this.#fatal(`${this.command.words}: ambiguous target`);
    const target = expanded.value[0]!;
    const stat = await this.fs.stat(target);
    const targetIsDir = stat.ok && isDirectory(stat.value);
    if (this.command.targetIsDirectory && !targetIsDir) {
      return this.#fatal(`${target}: ${stat.ok ? 'Not a directory' : stat.error.reason}`);
    }
    await this.#send(Buffer.of(0));
    await this.#receive(target, targetIsDir);
  }

  /** A protocol error or failure that ends the transfer, as scp's SCREWUP and exit(1). */
  async #fatal(message: string): Promise<void> {
    await this.#error(message);
    throw new ScpAbort(message);
  }

  /** Records until `E` (or the end of the stream at the top level), into `target`. */
  async #receive(target: string, targetIsDir: boolean): Promise<void> {
    let times: Times | null = null;
    for (let first = true; ; first = false) {
      const kind = await this.#in.byte();
      if (kind === null) return;
      if (kind === 0x01 || kind === 0x02) {
        // The client could not read one of its files: it says so and goes on (2: it gives up).
        const message = await this.#in.line();
        this.#errors++;
        this.logger.info({ message }, 'scp client reported an error');
        if (kind === 0x02) throw new ScpAbort(`the client gave up: ${message ?? ''}`);
        continue;
      }
      if (kind === 0x0a) return this.#fatal('protocol error: unexpected <newline>');
      const rest = await this.#in.line();
      if (rest === null) throw new ScpAbort('the client went away');
      const record = String.fromCharCode(kind) + rest;
      if (kind === 0x45 /* E */) {
        await this.#send(Buffer.of(0));
        return;
      }
      if (kind === 0x54 /* T */) {
        times = parseTimes(rest);
        if (!times) return this.#fatal('protocol error: mtime.sec not present');
        await this.#send(Buffer.of(0));
        continue;
      }
      if (kind !== 0x43 /* C */ && kind !== 0x44 /* D */) {
        // A first line that is no record is the remote shell talking ("No match."), as scp reports it.
        return this.#fatal(first ? record : 'protocol error: expected control record');
      }
      const header = parseHeader(rest);
      if (!header) return this.#fatal(`protocol error: bad ${kind === 0x43 ? 'file' : 'directory'} record`);
      if (header.name === '' || header.name === '..' || header.name.includes('/')) {
        return this.#fatal(`error: unexpected filename: ${header.name}`);
      }
      const path = targetIsDir ? posix.join(target, header.name) : target;
      if (kind === 0x44) await this.#receiveDirectory(path, header.mode, times);
      else await this.#receiveFile(path, header.mode, header.size, times);
      times = null;
    }
  }

  async #receiveDirectory(path: string, mode: number, times: Times | null): Promise<void> {
    if (!this.command.recursive) return this.#fatal('protocol error: received directory without -r');
    // Made writable for us whatever its mode, which it gets at the end when new or with -p (as scp does).
    const made = await this.fs.ensureDirectory(path, mode | 0o700, this.command.preserve);
    if (!made.ok) return this.#error(`${path}: ${made.error.reason}`);
    await this.#send(Buffer.of(0));
    await this.#receive(path, true);
    const error = await this.fs.setAttrs(path, {
      ...(made.value || this.command.preserve ? { mode } : {}),
      ...(times ? { atime: times.atime, mtime: times.mtime } : {}),
    });
    if (error) await this.#error(`${path}: ${error.reason}`);
  }

  async #receiveFile(path: string, mode: number, size: number, times: Times | null): Promise<void> {
    const opened = await this.fs.openWrite(path, {
      create: true,
      exclusive: false,
      truncate: true,
      append: false,
      mode,
    });
    if (!opened.ok) return this.#error(`${path}: ${opened.error.reason}`);
    const writer = new FileWriter(this.fs, path, opened.value, false);
    let failure: FsError | null = null;
    try {
      await this.#send(Buffer.of(0));
      let offset = 0;
      const complete = await this.#in.bytes(size, async (chunk) => {
        // After a failed write the bytes are still read, to stay in step with the client.
        if (!failure) failure = await writer.write(offset, chunk);
        offset += chunk.length;
      });
      if (!complete) throw new ScpAbort('the client went away');
      // The client's own verdict on the bytes it sent (an error if it could not read all of its file,
      // counted); answered either way, with our own verdict on writing them.
      await this.#response();
      failure ??= await writer.close();
      if (!failure && (this.command.preserve || times)) {
        failure = await this.fs.setAttrs(path, {
          ...(this.command.preserve ? { mode } : {}),
          ...(times ? { atime: times.atime, mtime: times.mtime } : {}),
        });
      }
      if (failure) await this.#error(`${path}: ${(failure as FsError).reason}`);
      else await this.#send(Buffer.of(0));
    } finally {
      writer.dispose();
    }
  }
}

/** The permission bits as scp writes them: four octal digits. */
function mode4(mode: number): string {
  return (mode & 0o7777).toString(8).padStart(4, '0');
}

/** `C0644 1234 name` / `D0755 0 name`, without the leading letter. */
function parseHeader(rest: string): { mode: number; size: number; name: string } | null {
  const match = /^([0-7]{4}) (\d+) (.*)$/s.exec(rest);
  if (!match) return null;
  const size = Number(match[2]);
  if (!Number.isSafeInteger(size)) return null;
  return { mode: Number.parseInt(match[1]!, 8), size, name: match[3]! };
}

/** `T<mtime> <usec> <atime> <usec>`, without the leading letter. */
function parseTimes(rest: string): Times | null {
  const match = /^(\d+) (\d+) (\d+) (\d+)$/.exec(rest);
  if (!match) return null;
  return { mtime: Number(match[1]), atime: Number(match[3]) };
}

import type { Readable, Writable } from 'node:stream';

/**
 * The SFTP version 3 wire protocol (draft-ietf-secsh-filexfer-02, with OpenSSH's extensions as its
 * PROTOCOL file describes them) over a raw subsystem channel. The relay speaks it itself rather than
 * through ssh2's SFTP server so it can advertise `limits@openssh.com` (OpenSSH's clients then read and
 * write 255 KiB per request instead of 32 KiB) and send the replies of one turn of the event loop as one
 * stream of bytes, which fills whole SSH packets instead of splitting every 32 KiB reply in two.
 */

export const STATUS = {
  OK: 0,
  EOF: 1,
  NO_SUCH_FILE: 2,
  PERMISSION_DENIED: 3,
  FAILURE: 4,
  BAD_MESSAGE: 5,
  OP_UNSUPPORTED: 8,
} as const;

const STATUS_TEXT: Record<number, string> = {
  [STATUS.OK]: 'Success',
  [STATUS.EOF]: 'End of file',
  [STATUS.NO_SUCH_FILE]: 'No such file',
  [STATUS.PERMISSION_DENIED]: 'Permission denied',
  [STATUS.FAILURE]: 'Failure',
  [STATUS.BAD_MESSAGE]: 'Bad message',
  [STATUS.OP_UNSUPPORTED]: 'Operation unsupported',
};

export const OPEN_FLAG = {
  READ: 0x01,
  WRITE: 0x02,
  APPEND: 0x04,
  CREAT: 0x08,
  TRUNC: 0x10,
  EXCL: 0x20,
} as const;

const ATTR = { SIZE: 0x1, UIDGID: 0x2, PERMISSIONS: 0x4, ACMODTIME: 0x8, EXTENDED: 0x80000000 } as const;

const TYPE = {
  INIT: 1,
  VERSION: 2,
  OPEN: 3,
  CLOSE: 4,
  READ: 5,
  WRITE: 6,
  LSTAT: 7,
  FSTAT: 8,
  SETSTAT: 9,
  FSETSTAT: 10,
  OPENDIR: 11,
  READDIR: 12,
  REMOVE: 13,
  MKDIR: 14,
  RMDIR: 15,
  REALPATH: 16,
  STAT: 17,
  RENAME: 18,
  READLINK: 19,
  SYMLINK: 20,
  STATUS: 101,
  HANDLE: 102,
  DATA: 103,
  NAME: 104,
  ATTRS: 105,
  EXTENDED: 200,
  EXTENDED_REPLY: 201,
} as const;

/** Largest message taken or sent: OpenSSH's SFTP_MAX_MSG_LENGTH, what its client and server accept. */
export const MAX_MESSAGE_BYTES = 256 * 1024;

/** Replies not yet sent (the client's window is shut) beyond which no more requests are read. */
const MAX_UNSENT_BYTES = 32 * 1024 * 1024;

/** Replies gathered before they are written without waiting for the turn of the event loop to end. */
const FLUSH_BYTES = 256 * 1024;

export interface SftpAttrs {
  size?: number;
  uid?: number;
  gid?: number;
  mode?: number;
  atime?: number;
  mtime?: number;
}

export interface NameEntry {
  filename: string;
  longname: string;
  attrs: SftpAttrs;
}

/** A request, by its SFTP name; `handle` fields are the opaque bytes the server handed out. */
export type SftpRequest =
  | { type: 'OPEN'; id: number; path: string; flags: number; attrs: SftpAttrs }
  | { type: 'CLOSE' | 'FSTAT' | 'READDIR'; id: number; handle: Buffer }
  | { type: 'READ'; id: number; handle: Buffer; offset: number; length: number }
  | { type: 'WRITE'; id: number; handle: Buffer; offset: number; data: Buffer }
  | {
      type: 'LSTAT' | 'STAT' | 'OPENDIR' | 'REMOVE' | 'RMDIR' | 'REALPATH' | 'READLINK';
      id: number;
      path: string;
    }
  | { type: 'SETSTAT' | 'MKDIR'; id: number; path: string; attrs: SftpAttrs }
  | { type: 'FSETSTAT'; id: number; handle: Buffer; attrs: SftpAttrs }
  | { type: 'RENAME'; id: number; from: string; to: string }
  /** In wire order: OpenSSH sends the link's target first (its PROTOCOL file, "SSH2_FXP_SYMLINK"). */
  | { type: 'SYMLINK'; id: number; first: string; second: string }
  | { type: 'EXTENDED'; id: number; name: string; data: Buffer };

export interface SftpHandlers {
  request(request: SftpRequest): void;
  /** The client sent EOF: no more requests come. */
  end(): void;
  /** The channel closed. */
  close(): void;
  /** The client broke the protocol; the channel is being closed. */
  protocolError(message: string): void;
}

class ParseError extends Error {}

/** Bounds-checked reading of one message. */
class Reader {
  #at = 0;
  constructor(private readonly buffer: Buffer) {}

  u8(): number {
    this.#need(1);
    return this.buffer[this.#at++]!;
  }
  u32(): number {
    this.#need(4);
    const value = this.buffer.readUInt32BE(this.#at);
    this.#at += 4;
    return value;
  }
  u64(): number {
    this.#need(8);
    const value = this.buffer.readBigUInt64BE(this.#at);
    this.#at += 8;
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new ParseError('64-bit value out of range');
    return Number(value);
  }
  bytes(): Buffer {
    const length = this.u32();
    this.#need(length);
    const value = this.buffer.subarray(this.#at, this.#at + length);
    this.#at += length;
    return value;
  }
  string(): string {
    return this.bytes().toString('utf8');
  }
  /** Whatever is left of the message. */
  rest(): Buffer {
    const value = this.buffer.subarray(this.#at);
    this.#at = this.buffer.length;
    return value;
  }
  attrs(): SftpAttrs {
    const flags = this.u32();
    const attrs: SftpAttrs = {};
    if (flags & ATTR.SIZE) attrs.size = this.u64();
    if (flags & ATTR.UIDGID) {
      attrs.uid = this.u32();
      attrs.gid = this.u32();
    }
    if (flags & ATTR.PERMISSIONS) attrs.mode = this.u32();
    if (flags & ATTR.ACMODTIME) {
      attrs.atime = this.u32();
      attrs.mtime = this.u32();
    }
    if (flags & ATTR.EXTENDED) {
      const count = this.u32();
      for (let i = 0; i < count; i++) {
        this.bytes();
        this.bytes();
      }
    }
    return attrs;
  }
  #need(count: number): void {
    if (this.#at + count > this.buffer.length) throw new ParseError('message too short');
  }
}

/** Message building: fields appended, the length prefix filled in at the end. */
class Writer {
  #parts: Buffer[] = [];
  #length = 0;

  u8(value: number): this {
    return this.#push(Buffer.of(value));
  }
  u32(value: number): this {
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32BE(value >>> 0);
    return this.#push(b);
  }
  u64(value: number): this {
    const b = Buffer.allocUnsafe(8);
    b.writeBigUInt64BE(BigInt(Math.max(0, Math.trunc(value))));
    return this.#push(b);
  }
  bytes(value: Buffer): this {
    this.u32(value.length);
    return this.#push(value);
  }
  /** Bytes without a length (the length was written before them). */
  raw(value: Buffer): this {
    return this.#push(value);
  }
  string(value: string): this {
    return this.bytes(Buffer.from(value, 'utf8'));
  }
  attrs(attrs: SftpAttrs): this {
    let flags = 0;
    if (attrs.size !== undefined) flags |= ATTR.SIZE;
    if (attrs.uid !== undefined && attrs.gid !== undefined) flags |= ATTR.UIDGID;
    if (attrs.mode !== undefined) flags |= ATTR.PERMISSIONS;
    if (attrs.atime !== undefined && attrs.mtime !== undefined) flags |= ATTR.ACMODTIME;
    this.u32(flags);
    if (flags & ATTR.SIZE) this.u64(attrs.size!);
    if (flags & ATTR.UIDGID) this.u32(attrs.uid!).u32(attrs.gid!);
    if (flags & ATTR.PERMISSIONS) this.u32(attrs.mode!);
    if (flags & ATTR.ACMODTIME) this.u32(attrs.atime!).u32(attrs.mtime!);
    return this;
  }
  /** The message with its length prefix, as parts (a large payload is not copied here). */
  done(): Buffer[] {
    const length = Buffer.allocUnsafe(4);
    length.writeUInt32BE(this.#length);
    return [length, ...this.#parts];
  }
  #push(part: Buffer): this {
    this.#parts.push(part);
    this.#length += part.length;
    return this;
  }
}

/**
 * One SFTP session on a subsystem channel: requests parsed and handed to `handlers` in order, replies
 * written in the order they are made. The client's INIT is answered here with version 3 and
 * `extensions` (name to version string).
 */
export class SftpChannel {
  #chunks: Buffer[] = [];
  #buffered = 0;
  #ready = false;
  #failed = false;
  #out: Buffer[] = [];
  #outBytes = 0;
  #flushScheduled = false;

  constructor(
    private readonly channel: Readable & Writable & { exit?(code: number): void },
    private readonly handlers: SftpHandlers,
    private readonly extensions: Record<string, string>,
  ) {
    channel.on('data', (chunk: Buffer) => this.#receive(chunk));
    channel.on('end', () => handlers.end());
    channel.on('close', () => handlers.close());
    channel.on('error', () => {});
  }

  status(id: number, code: number, message?: string): void {
    this.#send(
      new Writer()
        .u8(TYPE.STATUS)
        .u32(id)
        .u32(code)
        .string(message ?? STATUS_TEXT[code] ?? '')
        .string('en'),
    );
  }

  handle(id: number, handle: Buffer): void {
    this.#send(new Writer().u8(TYPE.HANDLE).u32(id).bytes(handle));
  }

  /** A DATA reply from the pieces of its bytes (joined once, with the other replies of its flush). */
  data(id: number, parts: Buffer[]): void {
    const writer = new Writer().u8(TYPE.DATA).u32(id);
    writer.u32(parts.reduce((sum, part) => sum + part.length, 0));
    for (const part of parts) writer.raw(part);
    this.#send(writer);
  }

  name(id: number, entries: NameEntry[]): void {
    const writer = new Writer().u8(TYPE.NAME).u32(id).u32(entries.length);
    for (const entry of entries) writer.string(entry.filename).string(entry.longname).attrs(entry.attrs);
    this.#send(writer);
  }

  attrs(id: number, attrs: SftpAttrs): void {
    this.#send(new Writer().u8(TYPE.ATTRS).u32(id).attrs(attrs));
  }

  /** An EXTENDED_REPLY whose body `fill` writes. */
  extendedReply(id: number, fill: (writer: Writer) => void): void {
    const writer = new Writer().u8(TYPE.EXTENDED_REPLY).u32(id);
    fill(writer);
    this.#send(writer);
  }

  /** Ends the session as sftp-server exiting does: replies out, exit status, EOF and close. */
  finish(code: number): void {
    this.#flush();
    this.channel.exit?.(code);
    this.channel.end();
  }

  #send(writer: Writer): void {
    if (this.#failed) return;
    for (const part of writer.done()) {
      this.#out.push(part);
      this.#outBytes += part.length;
    }
    if (this.#outBytes >= FLUSH_BYTES) this.#flush();
    else if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(() => this.#flush());
    }
  }

  /**
   * Writes the pending replies as one buffer. ssh2 sends every write as packets of its own (a packet
   * each, up to the client's 32 KiB packet size), each encrypted, MACed and written to the socket
   * apart: a reply's 13-byte header and the pieces of tunnel chunks it is made of would each be a
   * packet. Joined, nearly every packet is full; the copy costs far less than the packets it saves
   * (a download sent a third fewer packets, bench/ssh-scp.ts).
   */
  #flush(): void {
    this.#flushScheduled = false;
    if (this.#out.length === 0) return;
    const out = this.#out;
    const bytes = this.#outBytes;
    this.#out = [];
    this.#outBytes = 0;
    this.channel.write(out.length === 1 ? out[0]! : Buffer.concat(out, bytes));
    // A client that asks faster than it reads is held back: no more requests are read until it has.
    // (Well-behaved clients keep a bounded number of requests in flight, 64 of 255 KiB for OpenSSH's.)
    if (this.channel.writableLength > MAX_UNSENT_BYTES && !this.channel.isPaused()) {
      this.channel.pause();
      this.channel.once('drain', () => this.channel.resume());
    }
  }

  #receive(chunk: Buffer): void {
    if (this.#failed) return;
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    while (this.#buffered >= 4) {
      const length = this.#peekLength();
      if (length === 0 || length > MAX_MESSAGE_BYTES + 1024) {
        this.#fail(`message of ${length} bytes`);
        return;
      }
      if (this.#buffered < 4 + length) return;
      this.#take(4);
      const message = this.#take(length);
      try {
        this.#dispatch(message);
      } catch (error) {
        if (!(error instanceof ParseError)) throw error;
        this.#fail(`malformed message: ${error.message}`);
        return;
      }
    }
  }

  #peekLength(): number {
    const first = this.#chunks[0]!;
    if (first.length >= 4) return first.readUInt32BE(0);
    return Buffer.concat(this.#chunks, 4).readUInt32BE(0);
  }

  /** The next `count` bytes: a view when they lie in one chunk, else joined. */
  #take(count: number): Buffer {
    this.#buffered -= count;
    const first = this.#chunks[0]!;
    if (first.length >= count) {
      if (first.length === count) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(count);
      return first.subarray(0, count);
    }
    const parts: Buffer[] = [];
    let left = count;
    while (left > 0) {
      const head = this.#chunks[0]!;
      if (head.length <= left) {
        parts.push(head);
        this.#chunks.shift();
        left -= head.length;
      } else {
        parts.push(head.subarray(0, left));
        this.#chunks[0] = head.subarray(left);
        left = 0;
      }
    }
    return Buffer.concat(parts, count);
  }

  #fail(message: string): void {
    this.#failed = true;
    this.handlers.protocolError(message);
    this.channel.end();
  }

  #dispatch(message: Buffer): void {
    const r = new Reader(message);
    const type = r.u8();
    if (!this.#ready) {
      if (type !== TYPE.INIT) throw new ParseError('expected INIT');
      r.u32();
      this.#ready = true;
      const writer = new Writer().u8(TYPE.VERSION).u32(3);
      for (const [name, version] of Object.entries(this.extensions)) writer.string(name).string(version);
      this.#send(writer);
      return;
    }
    const id = r.u32();
    const request = parseRequest(type, id, r);
    if (request) this.handlers.request(request);
    else this.status(id, STATUS.OP_UNSUPPORTED, `unknown request type ${type}`);
  }
}

/** The request of a message after its type and id; null for a type this server does not know. */
function parseRequest(type: number, id: number, r: Reader): SftpRequest | null {
  switch (type) {
    case TYPE.OPEN:
      return { type: 'OPEN', id, path: r.string(), flags: r.u32(), attrs: r.attrs() };
    case TYPE.CLOSE:
      return { type: 'CLOSE', id, handle: r.bytes() };
    case TYPE.FSTAT:
      return { type: 'FSTAT', id, handle: r.bytes() };
    case TYPE.READDIR:
      return { type: 'READDIR', id, handle: r.bytes() };
    case TYPE.READ:
      return { type: 'READ', id, handle: r.bytes(), offset: r.u64(), length: r.u32() };
    case TYPE.WRITE:
      return { type: 'WRITE', id, handle: r.bytes(), offset: r.u64(), data: r.bytes() };
    case TYPE.LSTAT:
      return { type: 'LSTAT', id, path: r.string() };
    case TYPE.STAT:
      return { type: 'STAT', id, path: r.string() };
    case TYPE.OPENDIR:
      return { type: 'OPENDIR', id, path: r.string() };
    case TYPE.REMOVE:
      return { type: 'REMOVE', id, path: r.string() };
    case TYPE.RMDIR:
      return { type: 'RMDIR', id, path: r.string() };
    case TYPE.REALPATH:
      return { type: 'REALPATH', id, path: r.string() };
    case TYPE.READLINK:
      return { type: 'READLINK', id, path: r.string() };
    case TYPE.SETSTAT:
      return { type: 'SETSTAT', id, path: r.string(), attrs: r.attrs() };
    case TYPE.MKDIR:
      return { type: 'MKDIR', id, path: r.string(), attrs: r.attrs() };
    case TYPE.FSETSTAT:
      return { type: 'FSETSTAT', id, handle: r.bytes(), attrs: r.attrs() };
    case TYPE.RENAME:
      return { type: 'RENAME', id, from: r.string(), to: r.string() };
    case TYPE.SYMLINK:
      return { type: 'SYMLINK', id, first: r.string(), second: r.string() };
    case TYPE.EXTENDED:
      return { type: 'EXTENDED', id, name: r.string(), data: r.rest() };
    default:
      return null;
  }
}

export type { Writer as SftpWriter };

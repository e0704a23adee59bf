import { type Static, Type } from '@sinclair/typebox';
import { Nullable } from './common.ts';
import { Sha256Hex, VolumePath } from './files.ts';

/**
 * Reverse tunnels (see README.md, "Tunnels"). The control plane sends the agent an `open_tunnel`
 * command carrying a one-time tunnel id and token; the agent connects the target inside the container,
 * then dials AGENT_TUNNEL_PATH presenting its host credential and the token, and joins the two.
 * - A stream target whose `upgrade` names TUNNEL_UPGRADE: an HTTP/1.1 Upgrade to that protocol; after
 *   `101 Switching Protocols` the connection is a raw byte pipe (no framing, TCP half close as is).
 * - A file target (bytes of a file in the workload's volume): always the raw upgrade.
 * - Everything else (exec targets; stream targets from a control plane that does not offer the
 *   upgrade): a WebSocket whose binary frames carry one channel byte, then the payload.
 */

/**
 * The `Upgrade` token of a raw stream tunnel (protocol-name/version, RFC 9110 section 7.8). A control
 * plane offers it in the stream target; an agent that knows it dials with it, an older one ignores the
 * field and dials a WebSocket, which the control plane still accepts for stream tunnels.
 */
export const TUNNEL_UPGRADE = 'anvil-tunnel/1';

/** Headers of the tunnel socket's upgrade request (the host credential goes in `authorization: Bearer`). */
export const TUNNEL_HEADERS = {
  hostId: 'x-anvil-host-id',
  tunnelId: 'x-anvil-tunnel-id',
  token: 'x-anvil-tunnel-token',
} as const;

/** Signals an exec session may send; anything else is refused on both sides. */
export const TUNNEL_SIGNALS = [
  'HUP',
  'INT',
  'QUIT',
  'KILL',
  'USR1',
  'USR2',
  'TERM',
  'CONT',
  'STOP',
  'TSTP',
  'WINCH',
  'ALRM',
] as const;
export type TunnelSignal = (typeof TUNNEL_SIGNALS)[number];

/** `SIGTERM`, `term` and `TERM` all name TERM; null for anything not in TUNNEL_SIGNALS. */
export function tunnelSignal(name: string): TunnelSignal | null {
  const bare = name.trim().toUpperCase().replace(/^SIG/, '');
  return (TUNNEL_SIGNALS as readonly string[]).includes(bare) ? (bare as TunnelSignal) : null;
}

const Dimension = Type.Integer({ minimum: 1, maximum: 10_000 });

export const TunnelTarget = Type.Union([
  /**
   * A TCP connection to `port` at the container's address on its Docker network. `upgrade`: the raw
   * upgrade the control plane accepts for this tunnel (TUNNEL_UPGRADE). An agent dials it only when it
   * knows that token, and a WebSocket otherwise (absent, or a later version it does not speak): any
   * string is valid here, so a newer control plane's offer never makes the command itself invalid.
   */
  Type.Object({
    kind: Type.Literal('stream'),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    upgrade: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  }),
  /** A process started with docker exec; argv, never a shell string. */
  Type.Object({
    kind: Type.Literal('exec'),
    command: Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 256 }),
    tty: Type.Boolean(),
    env: Type.Record(
      Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }),
      Type.String({ maxLength: 32_768 }),
      { additionalProperties: false },
    ),
    cols: Nullable(Dimension),
    rows: Nullable(Dimension),
    user: Nullable(Type.String({ minLength: 1, maxLength: 256 })),
    workingDir: Nullable(Type.String({ minLength: 1, maxLength: 4096 })),
  }),
  /**
   * Bytes of a regular file in the workload's volume (files.ts), from `offset`, `length` bytes (null: to
   * the end), always over the raw upgrade. With `sha256`, the agent refuses a file whose content is no
   * longer that digest (changed since the control plane looked). The agent writes the bytes and ends.
   */
  Type.Object({
    kind: Type.Literal('file'),
    path: VolumePath,
    offset: Type.Integer({ minimum: 0 }),
    length: Nullable(Type.Integer({ minimum: 0 })),
    sha256: Nullable(Sha256Hex),
  }),
]);
export type TunnelTarget = Static<typeof TunnelTarget>;

/** Random, url-safe: 128 bits for the id, 256 for the token (the control plane makes them). */
export const TunnelId = Type.String({ pattern: '^[A-Za-z0-9_-]{16,64}$' });
export const TunnelToken = Type.String({ pattern: '^[A-Za-z0-9_-]{32,128}$' });

/**
 * Frame channels of a WebSocket tunnel (exec, and streams of agents without the raw upgrade).
 * Directions: `in` control plane -> agent, `out` agent -> control plane.
 * - stdin (in): bytes for the TCP connection or the process's standard input;
 * - stdout (out): bytes from the TCP connection or the process (a PTY's whole output);
 * - stderr (out): the process's standard error (exec without a PTY only);
 * - resize (in): 4 bytes, cols then rows as big-endian uint16 (exec with a PTY);
 * - signal (in): the signal's name in ASCII, one of TUNNEL_SIGNALS;
 * - exit (out): 4 bytes, the exit code as big-endian int32; empty when it could not be learned;
 * - eof (both): the sender will send no more stdin/stdout bytes (a half close); the socket stays up;
 * - error (out): UTF-8 text, why the agent ends the tunnel abnormally; a close follows.
 * A tunnel ends when its WebSocket closes: 1000 after a normal end, 1011 after an error.
 */
export const TUNNEL_CHANNEL = {
  stdin: 0,
  stdout: 1,
  stderr: 2,
  resize: 3,
  signal: 4,
  exit: 5,
  eof: 6,
  error: 7,
} as const;
export type TunnelChannel = (typeof TUNNEL_CHANNEL)[keyof typeof TUNNEL_CHANNEL];

/** Largest payload per frame; larger writes are split. Far below MAX_FRAME_BYTES, which ws enforces. */
export const MAX_TUNNEL_CHUNK = 256 * 1024;

/** Close codes of a tunnel socket. */
export const TUNNEL_CLOSE = { normal: 1000, error: 1011 } as const;

export interface TunnelFrame {
  channel: TunnelChannel;
  payload: Buffer;
}

export function encodeFrame(channel: TunnelChannel, payload: Uint8Array = Buffer.alloc(0)): Buffer {
  const frame = Buffer.allocUnsafe(payload.length + 1);
  frame[0] = channel;
  frame.set(payload, 1);
  return frame;
}

/**
 * Frames of at most MAX_TUNNEL_CHUNK bytes of payload, from one payload or from the pieces of one (each
 * byte copied once, into its frame): writes that arrive together cross the tunnel as one frame rather
 * than a frame each, and a frame costs a WebSocket header, a socket write and a message event per side.
 */
export function encodeFrames(channel: TunnelChannel, payload: Buffer | readonly Buffer[]): Buffer[] {
  if (Buffer.isBuffer(payload)) {
    if (payload.length <= MAX_TUNNEL_CHUNK) return [encodeFrame(channel, payload)];
    const out: Buffer[] = [];
    for (let at = 0; at < payload.length; at += MAX_TUNNEL_CHUNK) {
      out.push(encodeFrame(channel, payload.subarray(at, at + MAX_TUNNEL_CHUNK)));
    }
    return out;
  }
  if (payload.length === 1) return encodeFrames(channel, payload[0]!);
  let left = 0;
  for (const part of payload) left += part.length;
  const out: Buffer[] = [];
  let frame: Buffer | null = null;
  let at = 0;
  for (const part of payload) {
    let from = 0;
    while (from < part.length) {
      if (!frame) {
        const size = Math.min(left, MAX_TUNNEL_CHUNK);
        frame = Buffer.allocUnsafe(size + 1);
        frame[0] = channel;
        at = 1;
        left -= size;
      }
      const copied = part.copy(frame, at, from, from + Math.min(part.length - from, frame.length - at));
      from += copied;
      at += copied;
      if (at === frame.length) {
        out.push(frame);
        frame = null;
      }
    }
  }
  // Pieces that were all empty: one empty frame, as for an empty payload.
  return out.length > 0 ? out : [encodeFrame(channel)];
}

/** Null for an empty frame or an unknown channel: the receiver ends the tunnel with an error. */
export function decodeFrame(frame: Buffer): TunnelFrame | null {
  if (frame.length === 0) return null;
  const channel = frame[0]!;
  if (channel > TUNNEL_CHANNEL.error) return null;
  return { channel: channel as TunnelChannel, payload: frame.subarray(1) };
}

export function encodeResize(cols: number, rows: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt16BE(clampDimension(cols), 0);
  payload.writeUInt16BE(clampDimension(rows), 2);
  return encodeFrame(TUNNEL_CHANNEL.resize, payload);
}

export function decodeResize(payload: Buffer): { cols: number; rows: number } | null {
  if (payload.length !== 4) return null;
  const cols = payload.readUInt16BE(0);
  const rows = payload.readUInt16BE(2);
  return cols > 0 && rows > 0 ? { cols, rows } : null;
}

export function encodeExit(code: number | null): Buffer {
  if (code === null) return encodeFrame(TUNNEL_CHANNEL.exit);
  const payload = Buffer.alloc(4);
  payload.writeInt32BE(code, 0);
  return encodeFrame(TUNNEL_CHANNEL.exit, payload);
}

export function decodeExit(payload: Buffer): number | null {
  return payload.length === 4 ? payload.readInt32BE(0) : null;
}

function clampDimension(n: number): number {
  return Math.max(1, Math.min(10_000, Math.trunc(n) || 1));
}

/**
 * What the flow control needs from a WebSocket (`ws` satisfies it): send with a callback that fires
 * once the data was handed to the kernel.
 */
export interface FrameSocket {
  send(data: Buffer, callback: (error?: Error) => void): void;
}

/**
 * Sends frames and counts the bytes not yet written out. `send` returns false once more than
 * `highWater` bytes are outstanding: the caller pauses its source and resumes on `onDrain`, called
 * when the outstanding bytes fall to `lowWater`. This is backpressure from the socket back to the
 * TCP connection or process feeding it.
 */
export class FrameSender {
  #outstanding = 0;
  #waiting: (() => void)[] = [];
  #failed: Error | null = null;

  constructor(
    private readonly socket: FrameSocket,
    private readonly highWater = 1024 * 1024,
    private readonly lowWater = 256 * 1024,
  ) {}

  get outstanding(): number {
    return this.#outstanding;
  }

  /** The first send error (the socket closed); later sends are dropped. */
  get failed(): Error | null {
    return this.#failed;
  }

  send(frame: Buffer): boolean {
    if (this.#failed) return false;
    this.#outstanding += frame.length;
    try {
      this.socket.send(frame, (error) => {
        this.#outstanding -= frame.length;
        if (error && !this.#failed) this.#failed = error;
        if (this.#outstanding <= this.lowWater || this.#failed) this.#drain();
      });
    } catch (error) {
      this.#outstanding -= frame.length;
      this.#failed ??= error as Error;
      this.#drain();
      return false;
    }
    return this.#outstanding <= this.highWater;
  }

  /** Calls `callback` once the outstanding bytes fall to the low-water mark (now, if they are). */
  onDrain(callback: () => void): void {
    if (this.#outstanding <= this.lowWater || this.#failed) callback();
    else this.#waiting.push(callback);
  }

  #drain(): void {
    for (const callback of this.#waiting.splice(0)) callback();
  }
}

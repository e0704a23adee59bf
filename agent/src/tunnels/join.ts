import {
  decodeFrame,
  encodeFrame,
  encodeFrames,
  FrameSender,
  type FrameSocket,
  TUNNEL_CHANNEL,
  TUNNEL_CLOSE,
  type TunnelChannel,
  type TunnelFrame,
} from '@anvil/shared/protocol';
import { type RawData, WebSocket } from 'ws';

const CLOSE_GRACE_MS = 2_000;

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/**
 * The agent's end of one tunnel socket: frames out with flow control, frames in decoded, and one
 * way to end it. `pause`/`resume` of the source are driven by the socket's outstanding bytes.
 */
export class TunnelEnd {
  readonly sender: FrameSender;
  #ended = false;

  constructor(
    readonly ws: WebSocket,
    handlers: { frame(frame: TunnelFrame): void; closed(): void },
  ) {
    this.sender = new FrameSender(ws as unknown as FrameSocket);
    ws.on('message', (data, isBinary) => {
      const frame = isBinary ? decodeFrame(toBuffer(data)) : null;
      if (!frame) {
        this.fail('undecodable frame from the control plane');
        return;
      }
      handlers.frame(frame);
    });
    ws.on('error', () => {});
    ws.on('close', () => {
      this.#ended = true;
      handlers.closed();
    });
  }

  get ended(): boolean {
    return this.#ended || this.ws.readyState !== WebSocket.OPEN;
  }

  /**
   * Sends bytes (pieces sent together are joined into as few frames as fit); calls `pause` when the
   * socket is behind and `resume` once it caught up.
   */
  data(
    channel: TunnelChannel,
    payload: Buffer | readonly Buffer[],
    flow: { pause(): void; resume(): void },
  ): void {
    let below = true;
    for (const frame of encodeFrames(channel, payload)) below = this.sender.send(frame);
    if (!below) {
      flow.pause();
      this.sender.onDrain(() => flow.resume());
    }
  }

  send(frame: Buffer): void {
    this.sender.send(frame);
  }

  /** A normal end: queued frames go first, then the close. */
  close(): void {
    this.#closeWith(TUNNEL_CLOSE.normal);
  }

  /** An abnormal end: the reason travels as an error frame before the close. */
  fail(reason: string): void {
    if (!this.ended) this.sender.send(encodeFrame(TUNNEL_CHANNEL.error, Buffer.from(reason.slice(0, 1024))));
    this.#closeWith(TUNNEL_CLOSE.error);
  }

  #closeWith(code: number): void {
    if (this.#ended) return;
    this.#ended = true;
    const ws = this.ws;
    try {
      ws.close(code);
    } catch {
      ws.terminate();
    }
    setTimeout(() => {
      if (ws.readyState !== WebSocket.CLOSED) ws.terminate();
    }, CLOSE_GRACE_MS).unref();
  }
}

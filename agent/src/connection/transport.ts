import { MAX_FRAME_BYTES } from '@anvil/shared/protocol';
import { WebSocket } from 'ws';

export interface TransportClose {
  code: number;
  reason: string;
}

/** One open connection to the control plane, as the rest of the agent sees it: text frames in and out. */
export interface Transport {
  /** Throws when the connection is no longer open. */
  send(text: string): void;
  /** Bytes queued but not yet written to the socket: the backpressure signal for log and metric batches. */
  readonly bufferedAmount: number;
  /** Frames received before a handler is set are queued, so none is lost between dial and handshake. */
  onMessage(handler: (text: string) => void): void;
  close(code?: number, reason?: string): void;
  readonly closed: Promise<TransportClose>;
}

export type Dialer = (url: string, signal: AbortSignal) => Promise<Transport>;

/**
 * The control plane answered the upgrade with an error status instead of a WebSocket. A 503 with
 * Retry-After (it admits only so many handshakes at once) says when to come back.
 */
export class DialRefusedError extends Error {
  constructor(
    message: string,
    readonly status: number,
    /** The server's Retry-After in ms; null when it gave none (or an HTTP date, which is not used). */
    readonly retryAfterMs: number | null,
  ) {
    super(message);
    this.name = 'DialRefusedError';
  }
}

/** Retry-After in delay-seconds (RFC 9110), as ms; anything else null. */
export function retryAfterMs(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || !/^\s*\d{1,6}\s*$/.test(value)) return null;
  return Number(value) * 1000;
}

export interface WsDialerOptions {
  handshakeTimeoutMs: number;
  /** Extra headers for the upgrade request (none are needed by the protocol itself). */
  headers?: Record<string, string>;
}

/** Dial with `ws`. Rejects with the HTTP status when the server answers the upgrade with an error page. */
export function wsDialer(options: WsDialerOptions): Dialer {
  return (url, signal) =>
    new Promise<Transport>((resolve, reject) => {
      const socket = new WebSocket(url, {
        handshakeTimeout: options.handshakeTimeoutMs,
        maxPayload: MAX_FRAME_BYTES,
        headers: options.headers ?? {},
        perMessageDeflate: false,
      });
      const onAbort = () => socket.terminate();
      signal.addEventListener('abort', onAbort, { once: true });

      let handler: ((text: string) => void) | null = null;
      const queued: string[] = [];
      let resolveClosed!: (close: TransportClose) => void;
      const closed = new Promise<TransportClose>((r) => {
        resolveClosed = r;
      });

      socket.on('message', (data, isBinary) => {
        const text = isBinary
          ? ''
          : Array.isArray(data)
            ? Buffer.concat(data).toString('utf8')
            : data.toString();
        if (handler) handler(text);
        else queued.push(text);
      });
      socket.on('unexpected-response', (_req, res) => {
        const status = res.statusCode ?? 0;
        const after = retryAfterMs(res.headers['retry-after']);
        reject(
          new DialRefusedError(
            `dial ${url}: server answered HTTP ${status} instead of upgrading` +
              (after === null ? '' : ` (retry after ${after / 1000} s)`),
            status,
            after,
          ),
        );
        socket.terminate();
      });
      socket.on('error', (err) => reject(new Error(`dial ${url}: ${err.message}`)));
      socket.on('close', (code, reason) => {
        signal.removeEventListener('abort', onAbort);
        resolveClosed({ code, reason: reason.toString() });
        reject(new Error(`dial ${url}: closed before opening (${code})`));
      });
      socket.on('open', () => {
        resolve({
          send(text) {
            if (socket.readyState !== WebSocket.OPEN) throw new Error('connection is not open');
            socket.send(text);
          },
          get bufferedAmount() {
            return socket.bufferedAmount;
          },
          onMessage(h) {
            handler = h;
            for (const text of queued.splice(0)) h(text);
          },
          close(code = 1000, reason = '') {
            if (socket.readyState === WebSocket.CLOSED) return;
            socket.close(code, reason);
            // A peer that never answers the close handshake must not hold the agent; ws would wait 30 s.
            setTimeout(() => socket.terminate(), 2_000).unref();
          },
          closed,
        });
      });
    });
}

import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';

/**
 * Status logged when the client closed its connection before the container's response reached it
 * (nginx's convention): nothing was relayed, and the container was not at fault.
 */
export const CLIENT_CLOSED = 499;

/**
 * Bytes of a container's response that may wait for a slow client before the container's connection is
 * no longer read. The TLS socket's high-water mark (16 KiB) is below one 64 KiB read from the tunnel, so
 * honouring write()'s verdict paused and resumed the tunnel on nearly every chunk of a large body; this
 * window of a few reads keeps the client's socket fed, and the bound per response stays fixed (this plus
 * one read), as nginx's proxy buffers do.
 */
export const RELAY_WINDOW_BYTES = 256 * 1024;

/**
 * Relays one container response into the client's ServerResponse, with backpressure both ways (a client
 * socket holding RELAY_WINDOW_BYTES unsent pauses the tunnel; its drain resumes it), and aborts the container request when the
 * client goes away first. undici's own handler interface, the one its HTTP/1.1 client calls directly,
 * rather than its `stream()` API: that adds per request an async resource, a promise, the listeners of
 * `stream.finished()` and a header object built only to be copied again.
 */
export class ResponseRelay implements Dispatcher.DispatchHandler {
  /** The container's status once its headers arrived; 502 until then. */
  status = 502;
  private abortUpstream: ((error?: Error) => void) | null = null;
  private settled = false;
  private readonly clientClosed = () => {
    if (this.settled || this.res.writableFinished) return;
    const error = new Error('the client closed the connection');
    // Settled first: aborting calls onError synchronously, which must not report a second time.
    this.settle(error, this.res.headersSent ? this.status : CLIENT_CLOSED);
    this.abortUpstream?.(error);
  };

  constructor(
    private readonly res: ServerResponse,
    /** The headers sent to the client, from the container's raw header list (name, value, …). */
    private readonly headersFor: (raw: Buffer[]) => OutgoingHttpHeaders,
    /** Called once: null when the whole response was handed to the client socket. */
    private readonly done: (error: Error | null, status: number) => void,
  ) {
    res.once('close', this.clientClosed);
  }

  onConnect(abort: (error?: Error) => void): void {
    this.abortUpstream = abort;
    if (this.settled) abort(new Error('the client closed the connection'));
  }

  onHeaders(statusCode: number, raw: Buffer[], resume: () => void): boolean {
    // 1xx interim responses (100 Continue, 103 Early Hints) are not relayed; the final one follows.
    if (statusCode < 200 || this.settled) return true;
    this.status = statusCode;
    this.res.writeHead(statusCode, this.headersFor(raw));
    this.res.on('drain', resume);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.settled) return true;
    // Past the high-water mark write() flags the response for 'drain', which resumes the container.
    this.res.write(chunk);
    return this.res.writableLength < RELAY_WINDOW_BYTES;
  }

  onComplete(): void {
    if (this.settled) return;
    this.res.end();
    this.settle(null, this.status);
  }

  onError(error: Error): void {
    if (!this.settled) this.settle(error, this.status);
  }

  private settle(error: Error | null, status: number): void {
    this.settled = true;
    this.res.off('close', this.clientClosed);
    this.done(error, status);
  }
}

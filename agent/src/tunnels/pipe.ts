import type { Socket } from 'node:net';

/** What a finished raw tunnel carried, for the logs. */
export interface PipeResult {
  /** Bytes from the container to the control plane, and back. */
  bytesOut: number;
  bytesIn: number;
  /** Why it ended abnormally; null after a clean close of both directions. */
  error: string | null;
}

/**
 * Bytes a relay direction lets wait in user space for the receiving socket before it stops reading the
 * sending one. Node's socket high-water mark (16 KiB) is below one 64 KiB read, so stream.pipe() paused
 * and resumed the sender (a readStop/readStart pair) on nearly every chunk of a large body; a window of a
 * few reads keeps the kernel busy while the bound per tunnel stays fixed (at most this plus one read).
 */
export const RELAY_WINDOW_BYTES = 256 * 1024;

/**
 * Copies `from` into `to`, pausing `from` once `to` holds RELAY_WINDOW_BYTES unwritten and resuming it
 * when `to` drains, and ends `to` when `from` ends (a FIN crosses as a FIN).
 */
function relay(from: Socket, to: Socket): void {
  from.on('data', (chunk: Buffer) => {
    // A write past the high-water mark sets the socket's need for 'drain', which resumes below.
    to.write(chunk);
    if (to.writableLength >= RELAY_WINDOW_BYTES) from.pause();
  });
  to.on('drain', () => {
    if (from.isPaused()) from.resume();
  });
  from.once('end', () => to.end());
}

/**
 * Joins a raw tunnel socket and the container's TCP connection: bytes both ways with bounded buffering
 * (relay), and each FIN crosses over as a FIN, so one side's half close leaves the other
 * direction open. An error on either socket resets both, so that the other end sees a failure rather
 * than a clean end that could pass a truncated stream for a whole one. Resolves once both are closed.
 */
export function pipeSockets(tunnel: Socket, tcp: Socket): Promise<PipeResult> {
  // The tunnel socket has already carried the upgrade request: count from here.
  const tunnelBase = tunnel.bytesWritten;
  const tcpBase = tcp.bytesWritten;
  return new Promise((resolve) => {
    let error: string | null = null;
    let open = 2;
    const abort = (what: string) => (cause: Error) => {
      error ??= `${what}: ${cause.message}`;
      reset(tunnel);
      reset(tcp);
    };
    const closed = () => {
      open -= 1;
      if (open === 0) {
        resolve({ bytesOut: tunnel.bytesWritten - tunnelBase, bytesIn: tcp.bytesWritten - tcpBase, error });
      }
    };
    tunnel.on('error', abort('tunnel socket'));
    tcp.on('error', abort('connection to the container'));
    tunnel.once('close', closed);
    tcp.once('close', closed);
    // A socket closed before both its directions ended (destroyed: the agent stopping) takes the other
    // with it, which the pipe alone would leave waiting. After a clean close the other socket has been
    // ended by the pipe and closes itself once its writes are out: resetting it could drop them.
    const follow = (socket: Socket, other: Socket) => () => {
      if (!(socket.readableEnded && socket.writableFinished)) reset(other);
    };
    tunnel.once('close', follow(tunnel, tcp));
    tcp.once('close', follow(tcp, tunnel));
    relay(tcp, tunnel);
    relay(tunnel, tcp);
  });
}

/** Ends a socket with a TCP reset where it can (a plain TCP handle), else destroys it. */
export function reset(socket: Socket): void {
  if (socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    // A TLS socket has no TCP handle of its own to reset.
    socket.destroy();
  }
}

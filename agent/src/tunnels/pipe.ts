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
 * Joins a raw tunnel socket and the container's TCP connection: bytes both ways with the sockets' own
 * backpressure (pipe), and each FIN crosses over as a FIN, so one side's half close leaves the other
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
    tcp.pipe(tunnel);
    tunnel.pipe(tcp);
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

import { connect, type Socket } from 'node:net';
import { encodeFrame, TUNNEL_CHANNEL } from '@anvil/shared/protocol';
import type { WebSocket } from 'ws';
import { TunnelEnd } from './join.ts';

/** Connects to the container's port; rejects with the socket error (ECONNREFUSED...) or on time-out. */
export function connectTcp(host: string, port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    // No Nagle delay: a small write (a request, the end of a response) leaves at once, as through nginx
    // (tcp_nodelay); the tunnel socket already sets it.
    const socket = connect({ host, port, allowHalfOpen: true, noDelay: true });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`connect ${host}:${port}: no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`connect ${host}:${port}: ${error.message}`));
    });
  });
}

/**
 * Joins a connected TCP socket and a tunnel socket until either ends. Half closes cross over (the
 * container's FIN becomes an eof frame, an eof frame becomes our FIN); backpressure both ways.
 * Resolves once both are closed.
 */
export function joinStream(ws: WebSocket, tcp: Socket): Promise<void> {
  return new Promise((resolve) => {
    let tcpClosed = false;
    let wsClosed = false;
    const settle = () => {
      if (tcpClosed && wsClosed) resolve();
    };
    const end = new TunnelEnd(ws, {
      frame(frame) {
        if (frame.channel === TUNNEL_CHANNEL.stdin) {
          if (!tcp.destroyed && !tcp.write(frame.payload)) {
            ws.pause();
            tcp.once('drain', () => ws.resume());
          }
        } else if (frame.channel === TUNNEL_CHANNEL.eof) {
          tcp.end();
        }
      },
      closed() {
        wsClosed = true;
        tcp.destroy();
        settle();
      },
    });
    const flow = { pause: () => tcp.pause(), resume: () => tcp.resume() };
    tcp.on('data', (chunk: Buffer) => end.data(TUNNEL_CHANNEL.stdout, chunk, flow));
    tcp.on('end', () => end.send(encodeFrame(TUNNEL_CHANNEL.eof)));
    tcp.on('error', (error) => end.fail(`connection to the container: ${error.message}`));
    tcp.on('close', () => {
      tcpClosed = true;
      end.close();
      settle();
    });
  });
}

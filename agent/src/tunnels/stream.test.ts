import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createServer, type Server, type Socket } from 'node:net';
import { decodeFrame, TUNNEL_CHANNEL } from '@anvil/shared/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { connectTcp, joinStream } from './stream.ts';

const TOTAL = 64 * 1024 * 1024;

describe('joinStream backpressure (real TCP and WebSocket over loopback)', () => {
  const closers: (() => void)[] = [];
  afterEach(() => {
    for (const close of closers.splice(0)) close();
  });

  it('stops reading the container while the tunnel socket is not drained, then delivers every byte', async () => {
    // The "container": writes 64 MiB as fast as its socket takes it, counting what it handed over.
    let written = 0;
    /** The container's writer waits for its socket to drain: it hands over nothing more until a read. */
    let blocked = false;
    const sent = createHash('sha256');
    const tcpServer: Server = createServer((socket: Socket) => {
      const chunk = Buffer.alloc(64 * 1024);
      const pump = () => {
        while (written < TOTAL) {
          chunk.fill(written % 251);
          sent.update(chunk);
          written += chunk.length;
          if (!socket.write(chunk)) {
            blocked = true;
            socket.once('drain', () => {
              blocked = false;
              pump();
            });
            return;
          }
        }
        socket.end();
      };
      pump();
    });
    await new Promise<void>((resolve) => tcpServer.listen(0, '127.0.0.1', resolve));
    closers.push(() => tcpServer.close());

    // The "control plane": accepts the tunnel socket but reads nothing until told to.
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await once(wss, 'listening');
    closers.push(() => wss.close());
    const accepted = once(wss, 'connection') as Promise<[WebSocket]>;
    const agentWs = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    await once(agentWs, 'open');
    const [cpWs] = await accepted;
    cpWs.pause();

    const tcp = await connectTcp('127.0.0.1', (tcpServer.address() as AddressInfo).port, 5_000);
    const joined = joinStream(agentWs, tcp);

    // Held back: the agent stopped reading the container and the container's writer waits on it.
    await vi.waitFor(
      () => {
        if (!(tcp.isPaused() && blocked)) throw new Error('the container is still read');
      },
      { timeout: 30_000, interval: 10 },
    );
    const whilePaused = written;
    expect(whilePaused).toBeLessThan(TOTAL / 2);

    const received = createHash('sha256');
    let bytes = 0;
    let eof = false;
    cpWs.on('message', (data: Buffer) => {
      const frame = decodeFrame(data)!;
      if (frame.channel === TUNNEL_CHANNEL.stdout) {
        received.update(frame.payload);
        bytes += frame.payload.length;
      } else if (frame.channel === TUNNEL_CHANNEL.eof) {
        eof = true;
        cpWs.send(Buffer.from([TUNNEL_CHANNEL.eof]));
      }
    });
    cpWs.resume();
    await joined;
    expect(eof).toBe(true);
    expect(bytes).toBe(TOTAL);
    expect(received.digest('hex')).toBe(sent.digest('hex'));
  });
});

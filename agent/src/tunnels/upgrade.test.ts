import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { type AddressInfo, createServer as createTcpServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { promisify } from 'node:util';
import { AGENT_TUNNEL_PATH, TUNNEL_HEADERS, TUNNEL_UPGRADE } from '@anvil/shared/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { pipeSockets } from './pipe.ts';
import { connectTcp } from './stream.ts';
import { dialUpgrade } from './upgrade.ts';

/** A stand-in control plane: a real HTTP server whose upgrade handler each test scripts. */
async function controlPlane(onUpgrade: (request: IncomingMessage, socket: Duplex) => void): Promise<Server> {
  const server = createServer((_request, response) => response.end());
  server.on('upgrade', onUpgrade);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

const dialOf = (server: Server) => ({
  url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}${AGENT_TUNNEL_PATH}`,
  hostId: 'host_a',
  credential: 'secret-credential',
  tunnelId: 'AAAAAAAAAAAAAAAAAAAAAA',
  token: 'B'.repeat(43),
  timeoutMs: 2_000,
});

const SWITCH = `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_UPGRADE}\r\n\r\n`;

describe('dialUpgrade: the raw stream tunnel dial', () => {
  const closers: (() => void)[] = [];
  afterEach(() => {
    for (const close of closers.splice(0)) close();
  });

  it('presents the credential and ticket, and keeps bytes that share a read with the 101', async () => {
    let seen: IncomingMessage | null = null;
    const server = await controlPlane((request, socket) => {
      seen = request;
      // One write: the head and the stream's first bytes arrive together, as they may on the wire.
      socket.write(`${SWITCH}first bytes`);
      socket.on('data', (chunk: Buffer) => socket.write(chunk));
    });
    closers.push(() => server.close());
    const socket = await dialUpgrade(dialOf(server));
    closers.push(() => socket.destroy());
    expect(socket).toBeInstanceOf(Socket);
    expect(seen!.headers).toMatchObject({
      connection: 'Upgrade',
      upgrade: TUNNEL_UPGRADE,
      authorization: 'Bearer secret-credential',
      [TUNNEL_HEADERS.hostId]: 'host_a',
      [TUNNEL_HEADERS.tunnelId]: 'AAAAAAAAAAAAAAAAAAAAAA',
      [TUNNEL_HEADERS.token]: 'B'.repeat(43),
    });
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString();
    });
    socket.write(' and an echo');
    await expect.poll(() => received).toBe('first bytes and an echo');
  });

  it("rejects with the control plane's status and reason when refused", async () => {
    const server = await controlPlane((_request, socket) => {
      const body = 'unknown, expired or already used tunnel token\n';
      socket.end(
        `HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
    });
    closers.push(() => server.close());
    await expect(dialUpgrade(dialOf(server))).rejects.toThrow(
      'the control plane refused the tunnel socket: HTTP 401 (unknown, expired or already used tunnel token)',
    );
  });

  it('speaks TLS to an https control plane, and the tunnel is the TLS socket', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-tunnel-tls-'));
    closers.push(() => void rm(dir, { recursive: true, force: true }));
    await promisify(execFile)('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-subj',
      '/CN=127.0.0.1',
      '-days',
      '1',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ]);
    const server = createHttpsServer({
      key: await readFile(join(dir, 'key.pem')),
      cert: await readFile(join(dir, 'cert.pem')),
    });
    server.on('upgrade', (_request: IncomingMessage, socket: Duplex) => {
      socket.write(SWITCH);
      socket.on('data', (chunk: Buffer) => socket.write(chunk));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    closers.push(() => server.close());
    // The agent trusts the system's CAs; this self-signed certificate is let through for the test only.
    const previous = process.env['NODE_TLS_REJECT_UNAUTHORIZED'];
    process.env['NODE_TLS_REJECT_UNAUTHORIZED'] = '0';
    let socket: Socket;
    try {
      socket = await dialUpgrade({
        ...dialOf(server as unknown as Server),
        url: `wss://127.0.0.1:${(server.address() as AddressInfo).port}${AGENT_TUNNEL_PATH}`,
      });
    } finally {
      if (previous === undefined) delete process.env['NODE_TLS_REJECT_UNAUTHORIZED'];
      else process.env['NODE_TLS_REJECT_UNAUTHORIZED'] = previous;
    }
    closers.push(() => socket.destroy());
    expect(socket).toBeInstanceOf(TLSSocket);
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString();
    });
    socket.write('over tls');
    await expect.poll(() => received).toBe('over tls');
  });

  it('gives up after the time-out when the control plane never answers', async () => {
    const server = await controlPlane(() => {});
    closers.push(() => {
      server.closeAllConnections();
      server.close();
    });
    await expect(dialUpgrade({ ...dialOf(server), timeoutMs: 200 })).rejects.toThrow(
      'tunnel socket: no answer within 200 ms',
    );
  });
});

describe('pipeSockets: a raw tunnel joined to the container', () => {
  it('keeps the other direction open after a half close, and closes both at the end', async () => {
    // The "container": reads until its client's FIN, then answers with the byte count and closes.
    const container = createTcpServer({ allowHalfOpen: true }, (socket) => {
      let count = 0;
      socket.on('data', (chunk: Buffer) => {
        count += chunk.length;
      });
      socket.on('end', () => socket.end(`got ${count}`));
    });
    container.listen(0, '127.0.0.1');
    await once(container, 'listening');
    // The "control plane": the tunnel's far end is a socket pair over loopback.
    let cpSide!: Socket;
    const cp = await controlPlane((_request, socket) => {
      socket.write(SWITCH);
      cpSide = socket as Socket;
      cpSide.allowHalfOpen = true;
    });
    try {
      const tunnel = await dialUpgrade(dialOf(cp));
      const tcp = await connectTcp('127.0.0.1', (container.address() as AddressInfo).port, 2_000);
      const piped = pipeSockets(tunnel, tcp);
      const payload = Buffer.alloc(3 * 1024 * 1024, 7);
      cpSide.end(payload);
      let reply = '';
      cpSide.on('data', (chunk: Buffer) => {
        reply += chunk.toString();
      });
      await once(cpSide, 'end');
      expect(reply).toBe(`got ${payload.length}`);
      expect(await piped).toEqual({ bytesIn: payload.length, bytesOut: reply.length, error: null });
    } finally {
      container.close();
      cp.close();
    }
  });

  it("resets the tunnel when the container's connection fails, so the far end sees no clean end", async () => {
    const container = createTcpServer((socket) => {
      socket.write('partial');
      setTimeout(() => socket.resetAndDestroy(), 50);
    });
    container.listen(0, '127.0.0.1');
    await once(container, 'listening');
    let cpSide!: Socket;
    const cp = await controlPlane((_request, socket) => {
      socket.write(SWITCH);
      cpSide = socket as Socket;
    });
    try {
      const tunnel = await dialUpgrade(dialOf(cp));
      const tcp = await connectTcp('127.0.0.1', (container.address() as AddressInfo).port, 2_000);
      const piped = pipeSockets(tunnel, tcp);
      const failure = new Promise<string>((resolve) => {
        cpSide.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
        cpSide.on('end', () => resolve('clean end'));
        cpSide.resume();
      });
      expect(await failure).toBe('ECONNRESET');
      expect((await piped).error).toMatch(/^connection to the container: /);
    } finally {
      container.close();
      cp.close();
    }
  });
});

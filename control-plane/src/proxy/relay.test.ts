import { once } from 'node:events';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../testing/wait.ts';
import { CLIENT_CLOSED, RELAY_WINDOW_BYTES, ResponseRelay } from './relay.ts';

/** Real servers over loopback: a container stand-in behind a front server relaying with ResponseRelay. */
async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Server> {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

const portOf = (server: Server) => (server.address() as AddressInfo).port;

/** Polls often: these conditions come within milliseconds over loopback. */
const until = (check: () => boolean) => waitFor('the relay to settle', check, 10_000, 10);

describe('ResponseRelay', () => {
  const servers: Server[] = [];
  const pools: Pool[] = [];
  afterEach(async () => {
    for (const pool of pools.splice(0)) await pool.destroy();
    for (const server of servers.splice(0)) {
      server.closeAllConnections();
      server.close();
    }
  });

  /** The front server; `settled` collects what each relay reported. */
  async function front(upstream: Server) {
    const pool = new Pool(`http://127.0.0.1:${portOf(upstream)}`);
    pools.push(pool);
    const settled: { error: Error | null; status: number }[] = [];
    /** The response's unsent bytes each time the relay stopped reading the container. */
    const pausedAt: number[] = [];
    const server = await listen((req, res) => {
      const relay = new ResponseRelay(
        res,
        (raw) => {
          const headers: Record<string, string> = { 'x-relayed': 'yes' };
          for (let i = 0; i < raw.length; i += 2)
            headers[raw[i]!.toString('latin1').toLowerCase()] = raw[i + 1]!.toString('latin1');
          return headers;
        },
        (error, status) => {
          settled.push({ error, status });
          if (error) res.destroy();
        },
      );
      const onData = relay.onData.bind(relay);
      relay.onData = (chunk) => {
        const more = onData(chunk);
        if (!more) pausedAt.push(res.writableLength);
        return more;
      };
      pool.dispatch({ path: req.url ?? '/', method: 'GET', headers: {} }, relay);
    });
    servers.push(server);
    return { port: portOf(server), settled, pausedAt };
  }

  it('relays status, headers and a large body, then reports success once', async () => {
    const body = Buffer.alloc(3 * 1024 * 1024, 'x');
    const upstream = await listen((_req, res) => {
      res.writeHead(201, { 'content-type': 'application/octet-stream', 'x-from': 'container' });
      res.end(body);
    });
    servers.push(upstream);
    const { port, settled } = await front(upstream);
    const response = await fetch(`http://127.0.0.1:${port}/`);
    expect(response.status).toBe(201);
    expect(response.headers.get('x-from')).toBe('container');
    expect(response.headers.get('x-relayed')).toBe('yes');
    expect(Buffer.from(await response.arrayBuffer()).equals(body)).toBe(true);
    await until(() => settled.length > 0);
    expect(settled).toEqual([{ error: null, status: 201 }]);
  });

  it('lets a window of the body wait for a client that does not read, never more, then delivers it whole', async () => {
    // 32 MiB: more than the kernel buffers between the front server and the stalled client hold.
    const body = Buffer.alloc(32 * 1024 * 1024, 'y');
    const upstream = await listen((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(body);
    });
    servers.push(upstream);
    const { port, settled, pausedAt } = await front(upstream);
    const client = request({ port, host: '127.0.0.1', path: '/large' });
    client.end();
    const [response] = (await once(client, 'response')) as [IncomingMessage];
    response.pause();
    await until(() => pausedAt.length > 0);
    // More than the socket's high-water mark and one read (what write()'s verdict allowed), never past
    // the window plus one read.
    expect(pausedAt[0]).toBeGreaterThan(128 * 1024);
    let received = 0;
    let intact = true;
    response.on('data', (chunk: Buffer) => {
      received += chunk.length;
      if (intact && chunk.some((byte) => byte !== 0x79)) intact = false;
    });
    response.resume();
    await once(response, 'end');
    expect({ received, intact }).toEqual({ received: body.length, intact: true });
    expect(Math.max(...pausedAt)).toBeLessThanOrEqual(RELAY_WINDOW_BYTES + 64 * 1024);
    await until(() => settled.length > 0);
    expect(settled).toEqual([{ error: null, status: 200 }]);
  });

  it('aborts the container request when the client leaves mid-body, reporting the status relayed', async () => {
    let upstreamClosed = false;
    const upstream = await listen((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: first\n\n');
      req.socket.once('close', () => {
        upstreamClosed = true;
      });
    });
    servers.push(upstream);
    const { port, settled } = await front(upstream);
    const client = request({ port, host: '127.0.0.1', path: '/events' });
    client.end();
    const [response] = (await once(client, 'response')) as [IncomingMessage];
    await once(response, 'data');
    client.destroy();
    await until(() => upstreamClosed && settled.length > 0);
    expect(settled).toHaveLength(1);
    expect(settled[0]!.status).toBe(200);
    expect(settled[0]!.error).toBeInstanceOf(Error);
  });

  it('aborts the container request when the client leaves before any response, reporting 499', async () => {
    let upstreamClosed = false;
    let asked = false;
    const upstream = await listen((req) => {
      asked = true;
      req.socket.once('close', () => {
        upstreamClosed = true;
      });
    });
    servers.push(upstream);
    const { port, settled } = await front(upstream);
    const client = request({ port, host: '127.0.0.1', path: '/slow' });
    client.on('error', () => {});
    client.end();
    await until(() => asked);
    client.destroy();
    await until(() => upstreamClosed && settled.length > 0);
    expect(settled).toHaveLength(1);
    expect(settled[0]!.status).toBe(CLIENT_CLOSED);
  });
});

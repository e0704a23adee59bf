import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { TunnelOpener } from '../fleet/tunnels/types.ts';
import { WorkerClient } from './worker-client.ts';

/**
 * Issue 19 (runsync overhead): the HTTP worker contract's jobs reuse a kept connection to the worker
 * instead of opening a tunnel each (a command to the agent, a look-up in the engine and two new
 * connections). The "tunnels" here are loopback connections to a real HTTP server, counted as opened.
 */
describe('worker client: kept connections per worker', () => {
  let server: Server | null = null;
  const serverSockets = new Set<Socket>();

  afterEach(async () => {
    for (const socket of serverSockets) socket.destroy();
    serverSockets.clear();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = null;
  });

  /** A worker echoing each job's id; `close` answers `Connection: close` as a one-shot worker does. */
  async function worker(close: boolean): Promise<number> {
    server = createServer((request, response) => {
      const parts: Buffer[] = [];
      request.on('data', (chunk: Buffer) => parts.push(chunk));
      request.on('end', () => {
        const job = JSON.parse(Buffer.concat(parts).toString('utf8')) as { id: string };
        const text = JSON.stringify({ output: { echo: job.id } });
        response.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(text),
          ...(close ? { connection: 'close' } : {}),
        });
        response.end(text);
      });
    });
    server.on('connection', (socket) => {
      serverSockets.add(socket);
      socket.once('close', () => serverSockets.delete(socket));
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    return typeof address === 'object' && address ? address.port : 0;
  }

  function opener(port: number) {
    const opened: string[] = [];
    const tunnels: TunnelOpener = {
      openStream: async (workloadId) => {
        opened.push(workloadId);
        const socket = connect(port, '127.0.0.1');
        await new Promise<void>((resolve, reject) => {
          socket.once('connect', resolve);
          socket.once('error', reject);
        });
        return socket;
      },
      openExec: async () => {
        throw new Error('not used');
      },
    };
    return { tunnels, opened };
  }

  const run = (client: WorkerClient, workerId: string, id: string) =>
    client.run(workerId, 8000, { id, input: {} }, { signal: new AbortController().signal });

  it('sends a worker’s jobs over one kept connection, one per worker', async () => {
    const { tunnels, opened } = opener(await worker(false));
    const client = new WorkerClient(() => tunnels);
    for (const id of ['j1', 'j2', 'j3']) {
      expect(await run(client, 'wl_a', id)).toEqual({ kind: 'output', output: { echo: id } });
    }
    expect(opened).toEqual(['wl_a']);
    expect(await run(client, 'wl_b', 'j4')).toEqual({ kind: 'output', output: { echo: 'j4' } });
    expect(opened).toEqual(['wl_a', 'wl_b']);
    expect(client.keptConnections).toBe(2);
  });

  it('opens a new connection for each job of a worker that closes them', async () => {
    const { tunnels, opened } = opener(await worker(true));
    const client = new WorkerClient(() => tunnels);
    for (const id of ['j1', 'j2']) {
      expect(await run(client, 'wl_a', id)).toEqual({ kind: 'output', output: { echo: id } });
    }
    expect(opened).toEqual(['wl_a', 'wl_a']);
  });

  it('a kept connection the worker closed is replaced: the next job still gets its answer', async () => {
    const { tunnels, opened } = opener(await worker(false));
    const client = new WorkerClient(() => tunnels);
    expect(await run(client, 'wl_a', 'j1')).toEqual({ kind: 'output', output: { echo: 'j1' } });
    // The worker drops its idle connection (its keep-alive timeout), as the next job goes out.
    for (const socket of serverSockets) socket.destroy();
    expect(await run(client, 'wl_a', 'j2')).toEqual({ kind: 'output', output: { echo: 'j2' } });
    expect(opened).toEqual(['wl_a', 'wl_a']);
  });
});

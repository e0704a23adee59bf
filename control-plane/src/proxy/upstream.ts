import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Pool } from 'undici';
import type { TunnelOpener } from '../fleet/tunnels/types.ts';

/** Gives a plain Duplex the net.Socket methods an HTTP client may call on it. */
export function socketLike<T extends Duplex>(stream: T): T {
  const target = stream as unknown as Record<string, unknown>;
  for (const method of ['setKeepAlive', 'setNoDelay', 'setTimeout', 'ref', 'unref']) {
    if (typeof target[method] !== 'function') target[method] = () => stream;
  }
  return stream;
}

/** Tunnel connections kept per container port; more requests at once wait for a free one. */
const CONNECTIONS_PER_PORT = 256;

/**
 * HTTP/1.1 connection pools into container ports, one per (cluster, port), whose connections are tunnel
 * streams: a browser's many requests reuse a few tunnels instead of opening one each.
 *
 * undici rather than node:http's Agent: on this path (request in, request out, body piped) node:http's
 * client costs about as much CPU per request as the whole HTTPS server side, undici's about half; its
 * `stream()` writes response chunks straight into the client's response with backpressure. No header or
 * body timeout: requests and streams (uploads, SSE, notebooks) may last as long as they need.
 */
export class UpstreamPool {
  private readonly pools = new Map<string, Pool>();

  constructor(private readonly tunnels: () => TunnelOpener) {}

  pool(clusterId: string, port: number): Pool {
    const key = `${clusterId}:${port}`;
    let pool = this.pools.get(key);
    if (!pool) {
      pool = new Pool(`http://${clusterId.replace('_', '-')}.tunnel:${port}`, {
        connections: CONNECTIONS_PER_PORT,
        headersTimeout: 0,
        bodyTimeout: 0,
        keepAliveTimeout: 30_000,
        keepAliveMaxTimeout: 600_000,
        connect: (_options, callback) => {
          this.tunnels()
            .openStream(clusterId, port)
            .then(
              (stream) => callback(null, socketLike(stream) as unknown as Socket),
              (error: Error) => callback(error, null),
            );
        },
      });
      this.pools.set(key, pool);
    }
    return pool;
  }

  /** A dedicated (unpooled) stream: WebSocket upgrades and health checks. */
  open(clusterId: string, port: number, signal?: AbortSignal): Promise<Duplex> {
    return this.tunnels()
      .openStream(clusterId, port, signal ? { signal } : undefined)
      .then(socketLike);
  }

  drop(clusterId: string): void {
    for (const [key, pool] of this.pools) {
      if (key.startsWith(`${clusterId}:`)) {
        this.pools.delete(key);
        void pool.destroy().catch(() => {});
      }
    }
  }

  destroy(): void {
    for (const pool of this.pools.values()) void pool.destroy().catch(() => {});
    this.pools.clear();
  }
}

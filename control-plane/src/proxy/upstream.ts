import { Agent, type ClientRequestArgs } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TunnelOpener } from '../tunnels/types.ts';

/**
 * http.Agent whose connections are tunnel streams into one container port. Keep-alive pools them per
 * mapping, so a browser's many requests reuse a few tunnels instead of opening one each.
 */
export class TunnelAgent extends Agent {
  constructor(private readonly open: () => Promise<Duplex>) {
    super({ keepAlive: true, maxSockets: 256, maxFreeSockets: 32, timeout: 0 });
  }

  override createConnection(
    _options: ClientRequestArgs,
    callback?: (error: Error | null, stream: Duplex) => void,
  ): Duplex {
    this.open().then(
      (stream) => callback?.(null, socketLike(stream)),
      (error: Error) => callback?.(error, undefined as never),
    );
    // Node's Agent waits for the callback when createConnection returns nothing.
    return undefined as never;
  }

  /** A tunnel stream has no TCP keep-alive or ref-counting to configure: pool it as it is. */
  override keepSocketAlive(socket: Duplex): boolean {
    (socket as { setTimeout?: (ms: number) => void }).setTimeout?.(0);
    return true;
  }
}

/** Gives a plain Duplex the net.Socket methods the http client may call on it. */
export function socketLike<T extends Duplex>(stream: T): T {
  const target = stream as unknown as Record<string, unknown>;
  for (const method of ['setKeepAlive', 'setNoDelay', 'setTimeout', 'ref', 'unref']) {
    if (typeof target[method] !== 'function') target[method] = () => stream;
  }
  return stream;
}

/** One agent per (cluster, port); dropped when a mapping changes or the proxy stops. */
export class UpstreamPool {
  private readonly agents = new Map<string, TunnelAgent>();

  constructor(private readonly tunnels: () => TunnelOpener) {}

  agent(clusterId: string, port: number): TunnelAgent {
    const key = `${clusterId}:${port}`;
    let agent = this.agents.get(key);
    if (!agent) {
      agent = new TunnelAgent(() => this.tunnels().openStream(clusterId, port));
      this.agents.set(key, agent);
    }
    return agent;
  }

  /** A dedicated (unpooled) stream: WebSocket upgrades and health checks. */
  open(clusterId: string, port: number, signal?: AbortSignal): Promise<Duplex> {
    return this.tunnels()
      .openStream(clusterId, port, signal ? { signal } : undefined)
      .then(socketLike);
  }

  drop(clusterId: string): void {
    for (const [key, agent] of this.agents) {
      if (key.startsWith(`${clusterId}:`)) {
        agent.destroy();
        this.agents.delete(key);
      }
    }
  }

  destroy(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}

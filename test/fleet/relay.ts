import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay between an agent and the control plane that a test can cut and restore, to play a
 * network drop. `reset` closes every link (both ends see the connection end, redials are refused);
 * `blackhole` keeps the sockets open but forwards nothing (no FIN, no RST: only heartbeats notice).
 */
export class TcpRelay {
  readonly #server: Server;
  readonly #links = new Set<{ client: Socket; upstream: Socket }>();
  #mode: 'open' | 'reset' | 'blackhole' = 'open';

  private constructor(
    server: Server,
    readonly targetPort: number,
  ) {
    this.#server = server;
  }

  static async start(targetPort: number): Promise<TcpRelay> {
    const server = createServer();
    const relay = new TcpRelay(server, targetPort);
    server.on('connection', (client) => relay.#accept(client));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return relay;
  }

  get port(): number {
    const address = this.#server.address();
    return typeof address === 'object' && address ? address.port : 0;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get openLinks(): number {
    return this.#links.size;
  }

  #accept(client: Socket): void {
    client.on('error', () => {});
    if (this.#mode === 'reset') {
      client.destroy();
      return;
    }
    if (this.#mode === 'blackhole') {
      // Accepted and held, never answered: the dialler times out on its own.
      const link = { client, upstream: client };
      this.#links.add(link);
      client.on('close', () => this.#links.delete(link));
      return;
    }
    const upstream = connect(this.targetPort, '127.0.0.1');
    upstream.on('error', () => client.destroy());
    const link = { client, upstream };
    this.#links.add(link);
    const forward = (from: Socket, to: Socket) => {
      from.on('data', (chunk: Buffer) => {
        if (this.#mode === 'open') to.write(chunk);
      });
      from.on('end', () => to.end());
      from.on('close', () => {
        to.destroy();
        this.#links.delete(link);
      });
    };
    forward(client, upstream);
    forward(upstream, client);
  }

  /** Cuts every current link and refuses (reset) or swallows (blackhole) new ones. */
  cut(mode: 'reset' | 'blackhole'): void {
    this.#mode = mode;
    if (mode === 'reset') this.#destroyAll();
  }

  /** Back to forwarding; links that were blackholed are closed, so both ends redial afresh. */
  restore(): void {
    this.#destroyAll();
    this.#mode = 'open';
  }

  #destroyAll(): void {
    for (const { client, upstream } of this.#links) {
      client.destroy();
      upstream.destroy();
    }
    this.#links.clear();
  }

  async close(): Promise<void> {
    this.#destroyAll();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

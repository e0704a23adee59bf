import { createServer, type Server, type Socket } from 'node:net';
import { AGENT_WORKER_API_PATH, WORKER_API_HEADERS } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import { connectUrl } from '../connection/url.ts';
import { errorMessage } from '../errors.ts';
import { pipeSockets, reset } from '../tunnels/pipe.ts';
import { dialRawUpgrade } from '../tunnels/upgrade.ts';
import type { ContainerAddresses } from './addresses.ts';

export interface WorkerApiRelayOptions {
  controlPlaneUrl: string;
  addresses: ContainerAddresses;
  /** The host id and credential of the current session; null while the agent has none. */
  credential: () => { hostId: string; credential: string } | null;
  logger: Logger;
  timeoutMs?: number;
}

/** `https://cp.example.com` -> `wss://cp.example.com/agent/v1/worker-api`. */
export function workerApiUrl(controlPlane: string): string {
  const url = new URL(connectUrl(controlPlane));
  url.pathname = url.pathname.replace(/\/agent\/v1\/connect$/, AGENT_WORKER_API_PATH);
  return url.toString();
}

/**
 * The worker API port containers reach the control plane through (WorkloadSpec.workerApi): each TCP
 * connection from one of this host's containers is relayed as it is over a raw upgrade the agent dials at
 * AGENT_WORKER_API_PATH with its host credential, naming the workload it found at the source address. So
 * workers behind NAT reach the control plane, containers never learn its address, and a connection from
 * anything that is not one of our containers (the host's other interfaces, another engine) is closed
 * before a byte is relayed. What the container may do there is the control plane's decision (the
 * worker's own token).
 */
export class WorkerApiRelay {
  readonly #server: Server;
  readonly #open = new Set<Socket>();
  #port: number | null = null;

  constructor(private readonly o: WorkerApiRelayOptions) {
    this.#server = createServer({ allowHalfOpen: true }, (socket) => void this.#relay(socket));
  }

  /** The port listened on, once listening. */
  get port(): number | null {
    return this.#port;
  }

  listen(port: number, address = '0.0.0.0'): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, address, () => {
        this.#server.off('error', reject);
        const bound = this.#server.address();
        this.#port = typeof bound === 'object' && bound ? bound.port : port;
        resolve(this.#port);
      });
    });
  }

  async #relay(socket: Socket): Promise<void> {
    this.#open.add(socket);
    socket.once('close', () => this.#open.delete(socket));
    socket.on('error', () => {});
    const log = this.o.logger;
    const remote = socket.remoteAddress ?? '';
    try {
      const workloadId = await this.o.addresses.workloadAt(remote);
      if (!workloadId) {
        log.warn(
          { remote },
          'worker API connection from an address that is no container of this host; closed',
        );
        reset(socket);
        return;
      }
      const session = this.o.credential();
      if (!session) throw new Error('the agent has no session with the control plane yet');
      const tunnel = await dialRawUpgrade({
        url: workerApiUrl(this.o.controlPlaneUrl),
        timeoutMs: this.o.timeoutMs ?? 10_000,
        what: 'worker API relay',
        headers: {
          authorization: `Bearer ${session.credential}`,
          [WORKER_API_HEADERS.hostId]: session.hostId,
          [WORKER_API_HEADERS.workloadId]: workloadId,
        },
      });
      if (socket.destroyed) {
        tunnel.destroy();
        return;
      }
      this.#open.add(tunnel);
      tunnel.once('close', () => this.#open.delete(tunnel));
      const result = await pipeSockets(tunnel, socket);
      if (result.error) log.debug({ workloadId, err: result.error }, 'worker API relay ended');
    } catch (error) {
      log.warn({ remote, err: errorMessage(error) }, 'worker API connection not relayed');
      reset(socket);
    }
  }

  /** Stops listening and cuts the relayed connections (their workers retry). */
  close(): Promise<void> {
    for (const socket of this.#open) reset(socket);
    if (this.#port === null) return Promise.resolve();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

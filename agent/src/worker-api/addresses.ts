import type Dockerode from 'dockerode';
import { LABELS } from '../docker/labels.ts';

/** How long a looked-up address map is trusted before a miss reads the engine again. */
const REFRESH_MS = 500;

/**
 * Which of this host's workloads holds an address on a Docker network: the worker API relay answers only
 * containers the agent runs, and tells the control plane whose connection it relays. Read from the engine
 * by our labels (as tunnels find their container), refreshed on a miss at most every REFRESH_MS: a
 * container just started is found at its first connection, and a flood from elsewhere costs no more than
 * two listings a second.
 */
export class ContainerAddresses {
  #byAddress = new Map<string, string>();
  #readAt = 0;
  #reading: Promise<void> | null = null;

  constructor(
    private readonly docker: Dockerode,
    /** Known once the agent has a host id; until then nothing is answered. */
    private readonly hostId: () => string | null,
  ) {}

  /** The workload whose running container has `address`, or null. */
  async workloadAt(address: string): Promise<string | null> {
    const ip = address.replace(/^::ffff:/, '');
    const known = this.#byAddress.get(ip);
    if (known) return known;
    if (Date.now() - this.#readAt >= REFRESH_MS) {
      this.#reading ??= this.#read().finally(() => {
        this.#reading = null;
      });
      await this.#reading;
    } else if (this.#reading) await this.#reading;
    return this.#byAddress.get(ip) ?? null;
  }

  async #read(): Promise<void> {
    const hostId = this.hostId();
    if (!hostId) return;
    const list = await this.docker.listContainers({
      filters: { label: [`${LABELS.managed}=true`, `${LABELS.host}=${hostId}`], status: ['running'] },
    });
    const next = new Map<string, string>();
    for (const container of list) {
      const workloadId = container.Labels?.[LABELS.workload];
      if (!workloadId) continue;
      for (const network of Object.values(container.NetworkSettings?.Networks ?? {})) {
        if (network.IPAddress) next.set(network.IPAddress, workloadId);
      }
    }
    this.#byAddress = next;
    this.#readAt = Date.now();
  }
}

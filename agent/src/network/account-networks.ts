import { createHash } from 'node:crypto';
import type { WorkloadSpec } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import type { Logger } from 'pino';
import { dockerMessage, dockerStatus, isConflict, isNotFound } from '../docker/errors.ts';
import { LABELS } from '../docker/labels.ts';
import { BRIDGE_PREFIX, type Firewall, type FirewallState } from './firewall.ts';
import { rendezvousRules } from './rendezvous-rules.ts';

/** Marks a network as one of the agent's account networks (beside anvil.managed and anvil.host). */
export const NETWORK_LABEL = 'anvil.network';
const BRIDGE_OPTION = 'com.docker.network.bridge.name';

/**
 * The Docker network a workload joins: its account's on this host. A spec without accountId (from a
 * control plane older than tenant isolation; this one always sends it) stays on Docker's default bridge,
 * as before, and is not isolated: the reconciler logs it.
 * A multi-host training gang's workers stay on their account network too: their path to rank 0 is a port
 * published on rank 0's host (spec.rendezvous), fenced by the rendezvous rules (rendezvous-rules.ts).
 */
export function networkNameOf(spec: Pick<WorkloadSpec, 'accountId'>): string | null {
  return spec.accountId ? `anvil-acct-${spec.accountId}` : null;
}

/** Docker's default network, where a workload without an account runs (not isolated). */
export const UNISOLATED_NETWORK = 'bridge';

/**
 * The bridge interface of a network: named by us so the firewall rules can name it before Docker creates
 * it and after dockerd restarts. Interface names hold at most 15 characters, and they are global to the
 * kernel, so the host id is hashed in: two engines on one machine never ask for the same name.
 */
export function bridgeNameOf(hostId: string, networkName: string): string {
  const hash = createHash('sha256').update(`${hostId}/${networkName}`).digest('hex');
  return `${BRIDGE_PREFIX}${hash.slice(0, 15 - BRIDGE_PREFIX.length)}`;
}

export interface AccountNetworksOptions {
  docker: Dockerode;
  hostId: string;
  firewall: Firewall;
  /** ANVIL_RENDEZVOUS_ADDRESS: where this host publishes rank 0's rendezvous port; null: none. */
  rendezvousAddress?: string | null;
  logger: Logger;
}

/**
 * One Docker bridge network per account per host, created before the account's first container and
 * removed with its last, each fenced by the firewall's rules (see bridgeRules). Every pass re-ensures the
 * rules of the networks in use, so rules lost to a reboot, a flush or a dockerd restart come back.
 */
export class AccountNetworks {
  readonly #o: AccountNetworksOptions;
  #warned = false;

  constructor(options: AccountNetworksOptions) {
    this.#o = options;
  }

  /** What the host can enforce, for the inventory. */
  state(): Promise<FirewallState> {
    return this.#o.firewall.probe();
  }

  async #ours(): Promise<Dockerode.NetworkInspectInfo[]> {
    try {
      return await this.#o.docker.listNetworks({
        filters: { label: [`${LABELS.managed}=true`, `${LABELS.host}=${this.#o.hostId}`, NETWORK_LABEL] },
      });
    } catch (err) {
      throw new Error(`list networks: ${dockerMessage(err)}`, { cause: err });
    }
  }

  /**
   * Creates the networks of `names` that are missing and puts their firewall rules in place, then this
   * host's rendezvous rules for the multi-host training workers of `desired` (none left: none kept).
   */
  async ensure(names: ReadonlySet<string>, desired: readonly WorkloadSpec[] = []): Promise<void> {
    await this.#ensureNetworks(names);
    const rules = rendezvousRules(
      desired,
      (spec) => {
        const name = networkNameOf(spec);
        return name ? bridgeNameOf(this.#o.hostId, name) : null;
      },
      this.#o.rendezvousAddress ?? null,
    );
    const tag = createHash('sha256').update(this.#o.hostId).digest('hex').slice(0, 12);
    await this.#o.firewall.rendezvous(tag, rules);
  }

  async #ensureNetworks(names: ReadonlySet<string>): Promise<void> {
    if (names.size === 0) return;
    const state = await this.#o.firewall.probe();
    if (!state.enforced && !this.#warned) {
      this.#warned = true;
      this.#o.logger.error(
        { reason: state.reason },
        'TENANT ISOLATION IS NOT ENFORCED on this host: containers of different accounts or the host itself may be reachable',
      );
    }
    const existing = new Set((await this.#ours()).map((n) => n.Name));
    for (const name of names) {
      const bridge = bridgeNameOf(this.#o.hostId, name);
      // Rules first: a container never runs on a bridge that is not fenced yet.
      await this.#o.firewall.ensure(bridge);
      if (!existing.has(name)) await this.#create(name, bridge);
    }
  }

  async #create(name: string, bridge: string): Promise<void> {
    const { docker, hostId, logger } = this.#o;
    try {
      await docker.createNetwork({
        Name: name,
        Driver: 'bridge',
        CheckDuplicate: true,
        Labels: { [LABELS.managed]: 'true', [LABELS.host]: hostId, [NETWORK_LABEL]: 'account' },
        Options: { [BRIDGE_OPTION]: bridge, 'com.docker.network.bridge.enable_icc': 'true' },
      });
      logger.info({ network: name, bridge }, 'account network created');
    } catch (err) {
      if (!isConflict(err)) throw new Error(`create network ${name}: ${dockerMessage(err)}`, { cause: err });
      // Taken: by a racing pass of ours (fine), or by a network Anvil does not own (refused).
      const details = await docker
        .getNetwork(name)
        .inspect()
        .catch(() => null);
      const labels = (details?.Labels ?? {}) as Record<string, string>;
      if (labels[LABELS.managed] !== 'true' || labels[LABELS.host] !== hostId) {
        throw new Error(`network ${name} exists and is not this agent's; refusing to put a workload on it`);
      }
    }
  }

  /**
   * Removes this host's account networks that are not in `keep` (with their rules). A network that still
   * has containers (one being removed) stays until a later pass.
   */
  async prune(keep: ReadonlySet<string>): Promise<void> {
    const { docker, firewall, logger } = this.#o;
    for (const network of await this.#ours()) {
      if (keep.has(network.Name)) continue;
      const bridge = network.Options?.[BRIDGE_OPTION] ?? bridgeNameOf(this.#o.hostId, network.Name);
      try {
        await docker.getNetwork(network.Id).remove();
      } catch (err) {
        if (!isNotFound(err)) {
          // 403: active endpoints left; a later pass removes it.
          logger.debug(
            { network: network.Name, status: dockerStatus(err), err: dockerMessage(err) },
            'account network not removed yet',
          );
          continue;
        }
      }
      await firewall.remove(bridge);
      logger.info({ network: network.Name, bridge }, 'account network removed');
    }
  }
}

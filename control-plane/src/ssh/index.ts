import type { AddressInfo } from 'node:net';
import type { LiveSessions } from '../access-revocation/live-sessions.ts';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { AccessControl } from '../accounts/access.ts';
import type { AuditLog } from '../accounts/audit.ts';
import type { AccountIpPolicy } from '../accounts/settings-ip-policy.ts';
import type { Clock } from '../auth/clock.ts';
import { ClusterAccess } from '../clusters/access.ts';
import type { ClusterViewParts } from '../clusters/view-parts.ts';
import type { Cluster } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { TunnelOpener } from '../fleet/tunnels/types.ts';
import type { Logger } from '../logger.ts';
import { SshGate } from './gate.ts';
import { loadHostKey } from './host-key.ts';
import { SshKeyService } from './keys.ts';
import { SshRelay } from './relay.ts';

export interface SshServiceOptions {
  db: Database;
  clock: Clock;
  access: AccessControl;
  audit: AuditLog;
  dataDir: string;
  /** Host name shown in ssh_connection (ANVIL_SSH_HOST). */
  publicHost: string;
  /** Where deleting an SSH key is announced. */
  revocations: AccessRevocations;
  /** Where relay connections are counted against the account's limit, and ended on revocation. */
  liveSessions: LiveSessions;
  /** The fleet's tunnels into containers (contract 4). */
  tunnels: TunnelOpener;
  logger: Logger;
  /** The account-wide address allowlist (security.api_access.ip_whitelist), checked before a session opens. */
  ipPolicy: AccountIpPolicy;
}

/** SSH keys, the SSH relay and the `ssh_connection` view of clusters. */
export class SshService {
  readonly keys: SshKeyService;
  readonly clusters: ClusterAccess;
  readonly gate: SshGate;
  #relay: SshRelay | null = null;
  #hostKeyFingerprint: string | null = null;

  constructor(private readonly options: SshServiceOptions) {
    this.keys = new SshKeyService(options.db, options.clock, options.revocations);
    this.clusters = new ClusterAccess(options.db, options.access);
    this.gate = new SshGate(options.db, this.clusters, this.keys, options.audit, options.ipPolicy);
  }

  /** Starts the relay (ANVIL_SSH_PORT; 0 picks a free port), creating the host key on first use. */
  async listen(port: number, host: string): Promise<AddressInfo> {
    if (this.#relay?.listening) return this.#relay.address()!;
    const hostKey = await loadHostKey(this.options.dataDir);
    this.#hostKeyFingerprint = hostKey.fingerprint;
    this.#relay = new SshRelay({
      hostKey: hostKey.privateKey,
      gate: this.gate,
      keys: this.keys,
      liveSessions: this.options.liveSessions,
      tunnels: () => this.options.tunnels,
      logger: this.options.logger.child({ component: 'ssh-relay' }),
    });
    const address = await this.#relay.listen(port, host);
    this.options.logger.info(
      { port: address.port, host_key: hostKey.fingerprint, host_key_path: hostKey.path },
      'ssh relay listening',
    );
    return address;
  }

  address(): AddressInfo | null {
    return this.#relay?.address() ?? null;
  }

  get hostKeyFingerprint(): string | null {
    return this.#hostKeyFingerprint;
  }

  async close(): Promise<void> {
    await this.#relay?.close();
  }

  /** `ssh_connection` of a cluster: only while the relay runs and the cluster has ssh_enabled. */
  connection(
    cluster: Pick<Cluster, 'id' | 'sshEnabled'>,
  ): { host: string; port: number; username: string } | null {
    const address = this.address();
    if (!cluster.sshEnabled || !address) return null;
    return { host: this.options.publicHost, port: address.port, username: cluster.id };
  }
}

/** Contract 3: the cluster view's ssh part, `{host, port, username}` or null. */
export function sshViewPart(ssh: SshService): NonNullable<ClusterViewParts['ssh']> {
  return (cluster) => ssh.connection(cluster);
}

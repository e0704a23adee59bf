import type { AuditLog } from '../accounts/audit.ts';
import type { AccountIpPolicy } from '../accounts/settings-ip-policy.ts';
import type { ClusterAccess } from '../clusters/access.ts';
import type { Cluster, SshKey } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { SshKeyService } from './keys.ts';
import { fingerprintOf } from './public-key.ts';

/** Reaching a cluster over SSH (or the web terminal) means a shell in it: it needs `write` on the cluster. */
export const SHELL_PERMISSION = 'write' as const;

export type GateResult =
  | { allowed: true; cluster: Cluster; key: SshKey; userId: string; reason: string }
  | { allowed: false; reason: string };

/**
 * Decides who may open SSH sessions into a cluster: the login name is the cluster id; the offered key
 * must be registered by a member of the cluster's account who holds `write` on the cluster (its owner,
 * a team manager, or a member it is shared with for write), decided by ClusterAccess. The cluster must
 * be running with ssh_enabled, and the client's address inside the account's ip_whitelist when one is in
 * force (the socket's peer: SSH carries no forwarded address). Refusals of known members are audited.
 */
export class SshGate {
  constructor(
    private readonly db: Database,
    private readonly clusters: ClusterAccess,
    private readonly keys: SshKeyService,
    private readonly audit: AuditLog,
    private readonly ipPolicy: AccountIpPolicy,
  ) {}

  /** Keys of the cluster account's members that are exactly this blob (none: unknown key or cluster). */
  async #candidates(username: string, keyBlob: Buffer): Promise<{ cluster: Cluster; keys: SshKey[] } | null> {
    if (!/^cluster_[a-z0-9]+$/.test(username)) return null;
    const cluster = await this.db.prisma.cluster.findFirst({ where: { id: username, deletedAt: null } });
    if (!cluster) return null;
    const keys = (await this.keys.findByFingerprint(cluster.accountId, fingerprintOf(keyBlob))).filter((k) =>
      Buffer.from(k.publicKey.split(' ')[1] ?? '', 'base64').equals(keyBlob),
    );
    return keys.length > 0 ? { cluster, keys } : null;
  }

  /** Whether a member of the cluster's account registered this key (answers the client's key query). */
  async registered(username: string, keyBlob: Buffer): Promise<boolean> {
    return (await this.#candidates(username, keyBlob)) !== null;
  }

  /**
   * The full decision, made once the client proved it holds the key: refusals of members are audited
   * (as access_denied, action ssh_connect_attempt).
   */
  async check(username: string, keyBlob: Buffer, ip: string | null): Promise<GateResult> {
    const found = await this.#candidates(username, keyBlob);
    if (!found) return { allowed: false, reason: 'unknown cluster or key not registered in its account' };
    const { cluster, keys } = found;
    const outside = await this.ipPolicy.admit(cluster.accountId, ip);
    if (outside) return { allowed: false, reason: outside.message };
    const fingerprint = fingerprintOf(keyBlob);
    let refusal = 'no member holding this key may reach the cluster';
    for (const key of keys) {
      const decision = await this.clusters.decideForMember(cluster, key.userId, SHELL_PERMISSION);
      if (!decision.allowed) {
        refusal = decision.reason;
        if (decision.member) {
          await this.audit.record({
            accountId: cluster.accountId,
            type: 'access_denied',
            action: 'ssh_connect_attempt',
            actor: { userId: key.userId, ip },
            resource: { type: 'cluster', id: cluster.id, name: cluster.name },
            details: {
              requiredPermission: SHELL_PERMISSION,
              requiredScope: 'clusters',
              reason: decision.reason,
              fingerprint,
            },
          });
        }
        continue;
      }
      if (!cluster.sshEnabled) return { allowed: false, reason: 'ssh_enabled is false on the cluster' };
      if (cluster.status !== 'running')
        return { allowed: false, reason: `cluster is ${cluster.status}, not running` };
      return { allowed: true, cluster, key, userId: key.userId, reason: decision.reason };
    }
    return { allowed: false, reason: refusal };
  }
}

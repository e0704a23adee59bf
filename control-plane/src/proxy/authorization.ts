import { ApiError } from '@anvil/shared';
import type { SessionAccessCheck } from '../access-revocation/access-check.ts';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { Clock } from '../auth/clock.ts';
import type { KeyResolver } from '../auth/key-resolver.ts';
import type { Principal } from '../auth/principal.ts';
import type { ClusterAccess } from '../clusters/access.ts';
import type { Database } from '../db/index.ts';
import type { ProxySessions } from './sessions.ts';
import type { ProxyPermission } from './types.ts';

/** How long the proxy trusts that a key's user may read a cluster (owner, share) before asking again. */
export const ACCESS_CACHE_MS = 5_000;

/** How long a member's account role is reused for a port's allowed_roles. */
const ROLE_CACHE_MS = 30_000;

/** Who passed a port's authentication. */
export interface ProxyCaller {
  userId: string;
  /** The member's account role (allowed_roles); null when the member is gone. */
  role: string | null;
  keyId: string;
}

export interface ProxyAuthorizationOptions {
  db: Database;
  clock: Clock;
  keys: KeyResolver;
  clusters: ClusterAccess;
  /** Where cookie sessions are stored (the cookie's session row). */
  sessions: ProxySessions;
  /** The re-check of a session's key, member and access, shared with terminals, log streams and SSH. */
  sessionAccess: SessionAccessCheck;
  /** Every revocation clears the caches here, so a revoked share or member is refused at once. */
  revocations: AccessRevocations;
}

interface KeyVerdict extends ProxyCaller {
  at: number;
}

/**
 * Who may pass an authenticated port, by Anvil key or by the login session's cookie, at the port's
 * required_permission; with the caches that keep a proxied request off the database.
 */
export class ProxyAuthorization {
  /** Cluster access verdicts per `<key id>:<cluster id>:<permission>` (key). */
  private readonly keyAccess = new Map<string, KeyVerdict>();
  private readonly keyChecks = new Map<string, Promise<KeyVerdict>>();
  private readonly roles = new Map<string, { role: string | null; at: number }>();

  constructor(private readonly options: ProxyAuthorizationOptions) {
    // A revoked share or suspended member stops reaching the cluster at once, not after ACCESS_CACHE_MS.
    options.revocations.subscribe(() => {
      this.keyAccess.clear();
      this.roles.clear();
    });
  }

  /**
   * An Anvil key presented to the proxy: valid, not a service key, scoped to clusters, and allowed
   * `permission` on this cluster (the key's own permissions and the member's access alike).
   * The key itself is checked on every request through the KeyResolver, whose cache every revocation,
   * rotation or suspension clears in all processes at once, so a revoked key is refused immediately.
   * Only the cluster access verdict (owner or share) is kept here, per key, cluster and permission, for
   * ACCESS_CACHE_MS: an unshared cluster stops being reachable through the proxy within that bound.
   */
  async key(
    authorization: string,
    clusterId: string,
    ip: string,
    permission: ProxyPermission,
  ): Promise<ProxyCaller> {
    const header = authorization.startsWith('Bearer ')
      ? authorization
      : authorization.replace(/^Bearer\s+/i, 'Bearer ');
    const { keys, clock, clusters } = this.options;
    const principal = keys.resolveCached(header) ?? (await keys.resolve(header));
    refuseServiceKey(principal);
    if (!principal.scopes.includes('clusters')) {
      throw new ApiError('FORBIDDEN', 'this API key is not scoped to clusters', { scope: 'clusters' });
    }
    if (!principal.permissions.includes(permission)) {
      throw new ApiError('FORBIDDEN', `this port needs a key with the ${permission} permission`, {
        required_permission: `clusters:${permission}`,
        keyPermissions: principal.permissions,
      });
    }
    const cacheKey = `${principal.keyId}:${clusterId}:${permission}`;
    const nowMs = clock.now().getTime();
    const cached = this.keyAccess.get(cacheKey);
    if (cached && nowMs - cached.at < ACCESS_CACHE_MS) return cached;
    // Requests arriving while the access is being checked share the check rather than each querying.
    let check = this.keyChecks.get(cacheKey);
    if (!check) {
      check = clusters
        .require({ principal, ip }, clusterId, permission)
        .then(() => ({
          userId: principal.userId,
          role: principal.userRole,
          keyId: principal.keyId,
          at: nowMs,
        }))
        .finally(() => this.keyChecks.delete(cacheKey));
      this.keyChecks.set(cacheKey, check);
    }
    const entry = await check;
    if (this.keyAccess.size >= 10_000) this.keyAccess.clear();
    this.keyAccess.set(cacheKey, entry);
    return entry;
  }

  /**
   * The caller behind a login session's cookie on this port, or null (unknown, expired, another port's,
   * or its access is gone, in which case the session ends). One access check covers both what the
   * session was opened with (its key and member) and the port's level (`permission`, which may have been
   * raised after the login): only when that fails is read access asked for, to tell a session that lost
   * its access (ended) from a member short of the port's level (403 INSUFFICIENT_PERMISSIONS; the
   * session stays, for when the level is lowered again).
   */
  async cookie(
    cookie: string,
    cluster: { id: string; accountId: string },
    internalPort: number,
    permission: ProxyPermission,
  ): Promise<ProxyCaller | null> {
    const session = await this.options.sessions.find(cookie);
    if (!session || session.clusterId !== cluster.id || session.internalPort !== internalPort) return null;
    const grant = {
      accountId: cluster.accountId,
      userId: session.userId,
      clusterId: cluster.id,
      apiKeyId: session.keyId,
    };
    const verdict = await this.options.sessionAccess.check({ ...grant, permission });
    if (!verdict.allowed) {
      const base =
        permission === 'read'
          ? verdict
          : await this.options.sessionAccess.check({ ...grant, permission: 'read' });
      if (!base.allowed) {
        await this.options.sessions.end(cookie);
        return null;
      }
      throw new ApiError(
        'INSUFFICIENT_PERMISSIONS',
        `this port needs ${permission} access to the cluster (${verdict.reason})`,
        { required_permission: `clusters:${permission}` },
      );
    }
    return { userId: session.userId, role: await this.roleOf(session.userId), keyId: session.keyId };
  }

  private async roleOf(userId: string): Promise<string | null> {
    const nowMs = this.options.clock.now().getTime();
    const cached = this.roles.get(userId);
    if (cached && nowMs - cached.at < ROLE_CACHE_MS) return cached.role;
    const user = await this.options.db.prisma.user.findUnique({
      where: { id: userId },
      select: { role: true },
    });
    if (this.roles.size >= 10_000) this.roles.clear();
    this.roles.set(userId, { role: user?.role ?? null, at: nowMs });
    return user?.role ?? null;
  }
}

/** Service keys run workloads for programs; they never open a cluster's ports (nor its shell). */
export function refuseServiceKey(principal: Principal): void {
  if (principal.keyType === 'service') {
    throw new ApiError('FORBIDDEN', 'service keys cannot open cluster ports: use a member key', {
      keyType: 'service',
    });
  }
}

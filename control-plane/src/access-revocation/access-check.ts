import type { RolePermission } from '../accounts/roles.ts';
import type { Clock } from '../auth/clock.ts';
import type { ClusterAccess } from '../clusters/access.ts';
import type { Database } from '../db/index.ts';
import type { AccessRevocations } from './revocations.ts';

/** What a long-lived session was opened with, and so what must still hold for it to go on. */
export interface SessionGrant {
  accountId: string;
  userId: string;
  clusterId: string;
  permission: RolePermission;
  /** The API key the session was opened with (proxy cookies, terminals, log streams). */
  apiKeyId?: string | null | undefined;
  /** The SSH key an SSH connection authenticated with. */
  sshKeyId?: string | null | undefined;
}

export type Verdict = { allowed: true } | { allowed: false; reason: string };

/** How long a verdict is reused; every revocation in any process clears them all. */
export const VERDICT_CACHE_MS = 3_000;

const ALLOWED: Verdict = { allowed: true };

/**
 * Re-checks a session's access as a new request would be checked: the key it was opened with is
 * still valid (not revoked, expired or past its rotation grace), its member still active, and the
 * member still holds the permission on the cluster (role, grants, shares). Verdicts are cached for
 * a few seconds, and the cache is cleared by every revocation.
 */
export class SessionAccessCheck {
  readonly #verdicts = new Map<string, { verdict: Verdict; at: number }>();

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly clusters: ClusterAccess,
    revocations: AccessRevocations,
  ) {
    revocations.subscribe(() => this.#verdicts.clear());
  }

  /** `fresh` skips the cache (a revocation is being applied). */
  async check(grant: SessionGrant, options: { fresh?: boolean } = {}): Promise<Verdict> {
    const cacheKey = [
      grant.accountId,
      grant.userId,
      grant.clusterId,
      grant.permission,
      grant.apiKeyId ?? '',
      grant.sshKeyId ?? '',
    ].join('\n');
    const nowMs = this.clock.now().getTime();
    const cached = this.#verdicts.get(cacheKey);
    if (!options.fresh && cached && nowMs - cached.at < VERDICT_CACHE_MS) return cached.verdict;
    const verdict = await this.#decide(grant, nowMs);
    if (this.#verdicts.size >= 10_000) this.#verdicts.clear();
    this.#verdicts.set(cacheKey, { verdict, at: nowMs });
    return verdict;
  }

  async #decide(grant: SessionGrant, nowMs: number): Promise<Verdict> {
    const { db } = this;
    if (grant.apiKeyId) {
      const key = await db.prisma.apiKey.findUnique({ where: { id: grant.apiKeyId } });
      if (!key || key.accountId !== grant.accountId || key.userId !== grant.userId)
        return { allowed: false, reason: 'the API key no longer exists' };
      if (key.status === 'revoked') return { allowed: false, reason: 'the API key was revoked' };
      if (key.status === 'rotated' && !(key.graceUntil && key.graceUntil.getTime() > nowMs))
        return { allowed: false, reason: 'the API key was rotated and its grace period is over' };
      if (key.expiresAt && key.expiresAt.getTime() <= nowMs)
        return { allowed: false, reason: 'the API key expired' };
    }
    if (grant.sshKeyId) {
      const key = await db.prisma.sshKey.findFirst({ where: { id: grant.sshKeyId, userId: grant.userId } });
      if (!key) return { allowed: false, reason: 'the SSH key was removed' };
    }
    const user = await db.prisma.user.findFirst({
      where: { id: grant.userId, accountId: grant.accountId },
      select: { status: true },
    });
    if (!user || user.status === 'removed')
      return { allowed: false, reason: 'the member was removed from the account' };
    if (user.status !== 'active') return { allowed: false, reason: `the member is ${user.status}` };
    const cluster = await db.prisma.cluster.findFirst({
      where: { id: grant.clusterId, accountId: grant.accountId, deletedAt: null },
    });
    if (!cluster) return { allowed: false, reason: 'the cluster was deleted' };
    const decision = await this.clusters.decideForMember(cluster, grant.userId, grant.permission);
    return decision.allowed ? ALLOWED : { allowed: false, reason: decision.reason };
  }
}

import { createHash, randomBytes } from 'node:crypto';
import { ApiError } from '@anvil/shared';
import type { Logger } from 'pino';
import type { SessionAccessCheck } from '../access-revocation/access-check.ts';
import type { AccessRevocations, Revocation } from '../access-revocation/revocations.ts';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';

/** Logins waiting for the cluster's lock queue for their connection rather than fail after Prisma's 2 s. */
const TX_OPTIONS = { maxWait: 10_000, timeout: 10_000 } as const;

/** A login ticket is good for one redemption within this time. */
export const TICKET_TTL_MS = 60_000;

export interface ProxySessionInfo {
  clusterId: string;
  internalPort: number;
  userId: string;
  keyId: string;
  expiresAt: Date;
}

const hashOf = (token: string) => createHash('sha256').update(token).digest('hex');

/**
 * One-time login tickets (issued through the authenticated API) and the cookie sessions they become.
 * Only sha256 hashes of either are stored. Sessions are cached in this process for a few seconds, and a
 * session is good only while what it was opened with holds: the key, its member, the member's access to
 * the cluster (re-checked on use by ProxyAuthorization, through SessionAccessCheck). A revocation deletes the sessions and
 * tickets that lost their access, and clears the cache, in every process.
 */
export class ProxySessions {
  private readonly cache = new Map<string, { session: ProxySessionInfo | null; at: number }>();

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: SessionAccessCheck,
    revocations: AccessRevocations,
    private readonly logger: Logger,
  ) {
    revocations.subscribe((revocation) => {
      this.cache.clear();
      this.purge(revocation).catch((error: unknown) =>
        this.logger.error({ err: error, revocation }, 'proxy sessions of a revocation were not deleted'),
      );
    });
  }

  /** Deletes the sessions and tickets a revocation concerns that no longer have their access. */
  async purge(revocation: Revocation): Promise<number> {
    if (revocation.userId === undefined && revocation.keyId === undefined) return 0;
    const rows = await this.db.prisma.proxySession.findMany({
      where: {
        ...(revocation.userId !== undefined ? { userId: revocation.userId } : {}),
        ...(revocation.keyId !== undefined ? { keyId: revocation.keyId } : {}),
        ...(revocation.resourceId !== undefined ? { clusterId: revocation.resourceId } : {}),
      },
    });
    const dead: string[] = [];
    for (const row of rows) {
      const verdict = await this.access.check(
        { ...row, accountId: revocation.accountId, permission: 'read', apiKeyId: row.keyId },
        { fresh: true },
      );
      if (!verdict.allowed) dead.push(row.tokenHash);
    }
    if (dead.length === 0) return 0;
    const { count } = await this.db.prisma.proxySession.deleteMany({ where: { tokenHash: { in: dead } } });
    for (const hash of dead) this.cache.delete(hash);
    return count;
  }

  async issueTicket(
    input: Omit<ProxySessionInfo, 'expiresAt'>,
  ): Promise<{ ticket: string; expiresAt: Date }> {
    const ticket = randomBytes(32).toString('base64url');
    const expiresAt = new Date(this.clock.now().getTime() + TICKET_TTL_MS);
    await this.db.prisma.proxySession.create({
      data: { tokenHash: hashOf(ticket), kind: 'ticket', ...input, expiresAt },
    });
    return { ticket, expiresAt };
  }

  /**
   * Redeems a ticket for `clusterId`/`internalPort` into a session cookie value. Refused (null) when
   * unknown, used, expired or for another mapping; 429 RATE_LIMITED (reason max_concurrent_sessions) when
   * the cluster already has its max_concurrent_sessions live sessions.
   */
  async redeem(
    ticket: string,
    clusterId: string,
    internalPort: number,
    timeoutMinutes: number,
  ): Promise<{ cookie: string; expiresAt: Date } | null> {
    const now = this.clock.now();
    const row = await this.db.prisma.proxySession.findUnique({ where: { tokenHash: hashOf(ticket) } });
    if (row?.kind !== 'ticket') return null;
    const deleted = await this.db.prisma.proxySession.deleteMany({ where: { tokenHash: row.tokenHash } });
    if (deleted.count !== 1 || row.expiresAt <= now) return null;
    if (row.clusterId !== clusterId || row.internalPort !== internalPort) return null;
    await this.db.prisma.proxySession.deleteMany({ where: { kind: 'session', expiresAt: { lte: now } } });
    const cookie = randomBytes(32).toString('base64url');
    const expiresAt = new Date(now.getTime() + timeoutMinutes * 60_000);
    await this.db.prisma.$transaction(async (tx) => {
      // Count and insert under the lock of the cluster's settings row, reading the limit there too:
      // logins redeemed at once, on one control-plane process or several, cannot all see room for one
      // more, and a limit just changed through another process applies at once.
      const locked = await tx.$queryRawUnsafe<{ max: number | null }[]>(
        'SELECT max_concurrent_sessions AS max FROM proxy_settings WHERE cluster_id = $1 FOR UPDATE',
        clusterId,
      );
      const maxSessions = locked[0]?.max ?? null;
      if (maxSessions !== null) {
        const live = await tx.proxySession.count({
          where: { clusterId, kind: 'session', expiresAt: { gt: now } },
        });
        if (live >= maxSessions) {
          throw new ApiError(
            'RATE_LIMITED',
            `this cluster already has ${live} proxy sessions (max ${maxSessions})`,
            {
              reason: 'max_concurrent_sessions',
              max_concurrent_sessions: maxSessions,
            },
          );
        }
      }
      await tx.proxySession.create({
        data: {
          tokenHash: hashOf(cookie),
          kind: 'session',
          clusterId,
          internalPort,
          userId: row.userId,
          keyId: row.keyId,
          expiresAt,
        },
      });
    }, TX_OPTIONS);
    return { cookie, expiresAt };
  }

  /**
   * The live session of a cookie, or null (unknown or expired). Whether what it was opened with still
   * holds is the caller's check (ProxyAuthorization.cookie, at the port's level), which ends it if not.
   */
  async find(cookie: string): Promise<ProxySessionInfo | null> {
    const hash = hashOf(cookie);
    const nowMs = this.clock.now().getTime();
    const cached = this.cache.get(hash);
    let session = cached && nowMs - cached.at < 5_000 ? cached.session : undefined;
    if (session === undefined) {
      const row = await this.db.prisma.proxySession.findUnique({ where: { tokenHash: hash } });
      session = row && row.kind === 'session' ? row : null;
      this.cache.set(hash, { session, at: nowMs });
      if (this.cache.size > 50_000) this.cache.clear();
    }
    if (!session || session.expiresAt.getTime() <= nowMs) return null;
    return session;
  }

  async end(cookie: string): Promise<void> {
    const hash = hashOf(cookie);
    this.cache.delete(hash);
    await this.db.prisma.proxySession.deleteMany({ where: { tokenHash: hash, kind: 'session' } });
  }
}

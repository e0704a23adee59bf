import { createHash, randomBytes } from 'node:crypto';
import { ApiError } from '@anvil/shared';
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
 * Only sha256 hashes of either are stored. Sessions are cached in this process for a few seconds.
 */
export class ProxySessions {
  private readonly cache = new Map<string, { session: ProxySessionInfo | null; at: number }>();

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

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

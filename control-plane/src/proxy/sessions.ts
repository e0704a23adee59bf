import { createHash, randomBytes } from 'node:crypto';
import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';

/** Name of the host-only cookie the proxy sets on `<cluster>-<port>.<domain>`; never forwarded. */
export const SESSION_COOKIE = 'anvil_proxy_session';
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
   * unknown, used, expired or for another mapping; 429 SESSION_LIMIT_EXCEEDED when the cluster already
   * has `maxSessions` live sessions.
   */
  async redeem(
    ticket: string,
    clusterId: string,
    internalPort: number,
    timeoutMinutes: number,
    maxSessions: number | null,
  ): Promise<{ cookie: string; expiresAt: Date } | null> {
    const now = this.clock.now();
    const row = await this.db.prisma.proxySession.findUnique({ where: { tokenHash: hashOf(ticket) } });
    if (!row || row.kind !== 'ticket') return null;
    const deleted = await this.db.prisma.proxySession.deleteMany({ where: { tokenHash: row.tokenHash } });
    if (deleted.count !== 1 || row.expiresAt <= now) return null;
    if (row.clusterId !== clusterId || row.internalPort !== internalPort) return null;
    await this.db.prisma.proxySession.deleteMany({ where: { kind: 'session', expiresAt: { lte: now } } });
    if (maxSessions !== null) {
      const live = await this.db.prisma.proxySession.count({
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
    const cookie = randomBytes(32).toString('base64url');
    const expiresAt = new Date(now.getTime() + timeoutMinutes * 60_000);
    await this.db.prisma.proxySession.create({
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

import { type AccountTier, ApiError, newId } from '@anvil/shared';
import type { AccessControl, Actor } from '../accounts/access.ts';
import type { AuditLog } from '../accounts/audit.ts';
import type { Clock } from '../auth/clock.ts';
import { type Database, soleProcess } from '../db/index.ts';
import { type Logger, silentLogger } from '../logger.ts';

/** A temporary multiplier on an account's rate limits (POST /v2/auth/temporary-boost). */
export interface Boost {
  id: string;
  accountId: string;
  multiplier: number;
  reason: string;
  startsAt: Date;
  expiresAt: Date;
  createdByKeyId: string;
  createdAt: Date;
}

export interface BoostRequest {
  multiplier: number;
  /** `<n>m`, `<n>h` or `<n>d`. */
  duration: string;
  reason: string;
}

/** Bounds of a boost: a boost may raise limits, never lower them, and never for long. */
export const BOOST_MIN_MULTIPLIER = 1;
export const BOOST_MAX_MULTIPLIER = 10;
export const BOOST_MIN_DURATION_MS = 60_000;
export const BOOST_MAX_DURATION_MS = 72 * 3_600_000;
export const BOOST_REASON_MAX = 500;
/**
 * The highest multiplier each tier may ask for: a boost is for a launch or an import, not a tier upgrade,
 * so it stays within reach of the next tier's limits.
 */
export const BOOST_TIER_CEILING: Readonly<Record<AccountTier, number>> = { free: 3, pro: 5, enterprise: 10 };
/** After a boost ends, how long until the account may ask for the next one (no back-to-back renewals). */
export const BOOST_COOLDOWN_MS = 7 * 86_400_000;

const CHANNEL = 'anvil_rate_limit_boosts';
const UNIT_MS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000 };

function invalid(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason });
}

/** `30m`, `24h`, `3d` → milliseconds; anything else, or outside 1m..72h, is a VALIDATION_ERROR. */
export function parseBoostDuration(duration: string): number {
  const match = /^(\d{1,6})([mhd])$/.exec(duration);
  if (!match) throw invalid('duration', 'must look like 30m, 24h or 3d');
  const ms = Number(match[1]) * (UNIT_MS[match[2]!] ?? 0);
  if (ms < BOOST_MIN_DURATION_MS || ms > BOOST_MAX_DURATION_MS) {
    throw invalid('duration', 'must be between 1m and 72h');
  }
  return ms;
}

/**
 * Boosts: recorded in rate_limit_boosts with their reason and the key that asked, and held in memory for
 * the hot path. Every process loads the active boosts at start, again whenever another process announces
 * one (LISTEN/NOTIFY), and every 30 s as a safety net for a lost NOTIFY (not in a sole process, PGlite: every
 * boost is asked for through it); expiry is checked against the clock at use.
 *
 * Asking needs manage_billing on the billing scope (owner, admin): a boost spends the operator's capacity
 * as a tier upgrade would. One boost at a time per account: asking while one is active answers 409
 * BOOST_ALREADY_ACTIVE rather than replacing it, and once it has ended the next one may start only after
 * BOOST_COOLDOWN_MS (409 BOOST_COOLDOWN), so a boost cannot be renewed forever. The multiplier is capped
 * per tier (BOOST_TIER_CEILING). Every boost granted is written to the audit log with its reason.
 */
export class BoostRegistry {
  private active = new Map<string, Boost>();
  private timer: NodeJS.Timeout | null = null;
  private unlisten: (() => Promise<void>) | null = null;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
    private readonly audit: AuditLog,
    private readonly logger: Logger = silentLogger,
    private readonly refreshMs: number | null = soleProcess(db) ? null : 30_000,
  ) {}

  async start(): Promise<void> {
    this.unlisten = await this.db.listen(CHANNEL, () => void this.reloadQuietly());
    await this.reload();
    if (this.refreshMs === null) return;
    this.timer = setInterval(() => void this.reloadQuietly(), this.refreshMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.unlisten?.();
  }

  /** The account's boost in force at `nowMs`, if any. */
  activeFor(accountId: string, nowMs: number): Boost | null {
    const boost = this.active.get(accountId);
    if (!boost) return null;
    return boost.startsAt.getTime() <= nowMs && nowMs < boost.expiresAt.getTime() ? boost : null;
  }

  multiplierFor(accountId: string, nowMs: number): number {
    return this.activeFor(accountId, nowMs)?.multiplier ?? 1;
  }

  async create(actor: Actor, request: BoostRequest): Promise<Boost> {
    const member = await this.access.require(actor, {
      permission: 'manage_billing',
      scope: 'billing',
      action: 'temporary_boost_attempt',
    });
    const caller = actor.principal;
    const { multiplier } = request;
    if (
      !Number.isFinite(multiplier) ||
      multiplier <= BOOST_MIN_MULTIPLIER ||
      multiplier > BOOST_MAX_MULTIPLIER
    ) {
      throw invalid(
        'multiplier',
        `must be greater than ${BOOST_MIN_MULTIPLIER} and at most ${BOOST_MAX_MULTIPLIER}`,
      );
    }
    const durationMs = parseBoostDuration(request.duration);
    const reason = request.reason.trim();
    if (reason.length === 0 || reason.length > BOOST_REASON_MAX) {
      throw invalid('reason', `must be 1-${BOOST_REASON_MAX} characters`);
    }
    const now = this.clock.now();
    const boost = await this.db.prisma.$transaction(async (tx) => {
      // Serialises boosts of one account across processes: the check and the insert see the same state.
      const [account] = await tx.$queryRaw<Array<{ tier: string }>>`
        SELECT tier FROM accounts WHERE id = ${caller.accountId} FOR UPDATE`;
      const tier = (account?.tier ?? 'free') as AccountTier;
      const ceiling = BOOST_TIER_CEILING[tier] ?? BOOST_TIER_CEILING.free;
      if (multiplier > ceiling) {
        throw invalid('multiplier', `must be at most ${ceiling} on the ${tier} tier`);
      }
      const current = await tx.rateLimitBoost.findFirst({
        where: { accountId: caller.accountId, startsAt: { lte: now } },
        orderBy: { expiresAt: 'desc' },
      });
      if (current && current.expiresAt.getTime() <= now.getTime()) {
        const next = new Date(current.expiresAt.getTime() + BOOST_COOLDOWN_MS);
        if (next.getTime() > now.getTime()) {
          throw new ApiError(
            'BOOST_COOLDOWN',
            `the last boost ended at ${current.expiresAt.toISOString()}; the next may start at ${next.toISOString()}`,
            {
              boostId: current.id,
              endedAt: current.expiresAt.toISOString(),
              nextAllowedAt: next.toISOString(),
            },
          );
        }
      } else if (current) {
        throw new ApiError(
          'BOOST_ALREADY_ACTIVE',
          `a boost is already active until ${current.expiresAt.toISOString()}; ask again once it has expired`,
          {
            boostId: current.id,
            multiplier: current.multiplier,
            expiresAt: current.expiresAt.toISOString(),
          },
        );
      }
      const created = await tx.rateLimitBoost.create({
        data: {
          id: newId('boost'),
          accountId: caller.accountId,
          multiplier,
          reason,
          startsAt: now,
          expiresAt: new Date(now.getTime() + durationMs),
          createdByKeyId: caller.keyId,
          createdAt: now,
        },
      });
      await this.audit.record(
        {
          accountId: caller.accountId,
          type: 'permission_change',
          action: 'temporary_boost_created',
          actor: { userId: member.userId, ip: actor.ip },
          resource: { type: 'rate_limit_boost', id: created.id },
          details: {
            multiplier,
            reason,
            tier,
            expiresAt: created.expiresAt.toISOString(),
            keyId: caller.keyId,
          },
        },
        tx,
      );
      return created;
    });
    this.active.set(boost.accountId, boost);
    await this.db.notify(CHANNEL, boost.accountId);
    return boost;
  }

  private async reload(): Promise<void> {
    const now = this.clock.now();
    const rows = await this.db.prisma.rateLimitBoost.findMany({
      where: { expiresAt: { gt: now } },
      orderBy: { startsAt: 'asc' },
    });
    this.active = new Map(rows.map((row) => [row.accountId, row]));
  }

  private async reloadQuietly(): Promise<void> {
    try {
      await this.reload();
    } catch (error) {
      this.logger.warn({ err: error }, 'rate-limit boosts could not be reloaded');
    }
  }
}

import {
  type AccountTier,
  ApiError,
  type ApiKeyEnvironment,
  hashApiKey,
  isWellFormedApiKey,
  type KeyPermission,
  type KeyScope,
  type KeyType,
} from '@anvil/shared';
import type { ApiKey } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { RefreshedCache } from '../util/refreshed-cache.ts';
import type { Clock } from './clock.ts';
import type { Principal } from './principal.ts';

const INVALIDATE_CHANNEL = 'anvil_auth_invalidate';
/** The payload that drops only the remembered unknown keys (a key was created somewhere). */
const KEY_CREATED = 'created';
/** Unknown keys remembered at most: a flood of distinct keys evicts the oldest, never grows memory. */
const MAX_UNKNOWN = 10_000;

interface CachedKey {
  principal: Principal;
  status: string;
  graceUntil: Date | null;
  userStatus: string;
}

const KEY_ROW_INCLUDE = {
  user: { select: { status: true, role: true } },
  account: { select: { tier: true } },
} as const;

type KeyRow = ApiKey & { user: { status: string; role: string }; account: { tier: string } };

function cachedKey(row: KeyRow): CachedKey {
  return {
    principal: {
      keyId: row.id,
      accountId: row.accountId,
      userId: row.userId,
      userRole: row.user.role,
      keyType: row.type as KeyType,
      environment: row.environment as ApiKeyEnvironment,
      permissions: row.permissions as KeyPermission[],
      scopes: row.scopes as KeyScope[],
      expiresAt: row.expiresAt,
      tier: row.account.tier as AccountTier,
    },
    status: row.status,
    graceUntil: row.graceUntil,
    userStatus: row.user.status,
  };
}

export interface KeyResolverOptions {
  db: Database;
  clock: Clock;
  /**
   * The oldest a resolved key may be when it is trusted without asking the database (30 s). Revocations
   * also notify every process at once; this bounds a missed notification.
   */
  cacheTtlMs?: number;
  /** How often the keys in use are re-read, all in one query (10 s), so none expires under a request. */
  cacheRefreshMs?: number;
  /** How long a well-formed key the database does not hold is refused without asking again. */
  unknownTtlMs?: number;
  /** How often last-used times are written back. */
  lastUsedFlushMs?: number;
  /** Where a failed write-back of last-used times is reported (it is retried at the next flush). */
  logger?: Logger;
}

function unauthorized(message: string, reason: string): ApiError {
  return new ApiError('UNAUTHORIZED', message, { reason });
}

/** The key in an Authorization header, not yet checked for shape. */
function presentedKey(authorization: string | undefined): string {
  if (!authorization) {
    throw unauthorized('missing API key: send "Authorization: Bearer <API_KEY>"', 'missing');
  }
  return authorization.startsWith('Bearer ') ? authorization.slice(7).trim() : authorization.trim();
}

/** The key in an Authorization header, checked for shape and checksum (no database involved). */
function keyValue(authorization: string | undefined): string {
  const value = presentedKey(authorization);
  if (!isWellFormedApiKey(value)) throw unauthorized('malformed API key', 'malformed');
  return value;
}

/**
 * Turns an Authorization header into a Principal. Malformed keys are refused by their checksum without
 * touching the database; valid keys are cached, and every revocation, rotation or suspension is
 * broadcast over LISTEN/NOTIFY so all control-plane processes drop the entry at once. Keys in use are
 * re-read together in the background (util/refreshed-cache.ts): one query every cacheRefreshMs for all of
 * them, instead of three per key and expiry with a request waiting on them. Status, expiry and the
 * owner's state are still checked on every request.
 */
export class KeyResolver {
  private readonly cache: RefreshedCache<CachedKey>;
  /**
   * Hashes of well-formed keys the database does not hold → when that was found: a flood of made-up keys
   * (valid checksum, random body) costs one query per key per unknownTtl, not one per request. Creating a
   * key clears it here and, by notification, in every other process.
   */
  private readonly unknown = new Map<string, number>();
  private readonly unknownTtl: number; /** Key id → Unix ms of its latest use, written back in batches. */
  private readonly lastUsed = new Map<string, number>();
  private flushTimer: NodeJS.Timeout | null = null;
  private unlisten: (() => Promise<void>) | null = null;

  constructor(private readonly options: KeyResolverOptions) {
    this.unknownTtl = options.unknownTtlMs ?? 30_000;
    this.cache = new RefreshedCache<CachedKey>({
      name: 'API key',
      loadMany: (hashes) => this.loadMany(hashes),
      refreshEveryMs: options.cacheRefreshMs ?? 10_000,
      maxAgeMs: options.cacheTtlMs ?? 30_000,
      now: () => options.clock.now().getTime(),
      ...(options.logger ? { logger: options.logger } : {}),
    });
  }

  async start(): Promise<void> {
    this.unlisten = await this.options.db.listen(INVALIDATE_CHANNEL, (payload) => {
      this.unknown.clear();
      if (payload !== KEY_CREATED) this.cache.clear();
    });
    this.flushTimer = setInterval(() => {
      this.flushLastUsed().catch((error: unknown) =>
        this.options.logger?.warn(
          // The ids of the keys waiting (the first 20: a log line, not a dump).
          { err: error, keys: this.lastUsed.size, keyIds: [...this.lastUsed.keys()].slice(0, 20) },
          "writing API keys' last-used times failed; retried at the next flush",
        ),
      );
    }, this.options.lastUsedFlushMs ?? 15_000);
    this.flushTimer.unref();
  }

  async stop(): Promise<void> {
    if (this.flushTimer) clearInterval(this.flushTimer);
    await this.unlisten?.();
    await this.cache.stop();
    await this.flushLastUsed();
  }

  /** Re-reads the keys in use now, in one query (what the background timer does every cacheRefreshMs). */
  refreshCached(): Promise<void> {
    return this.cache.refresh();
  }

  /** Drops every cached key here and in every other process sharing the database. */
  async invalidate(): Promise<void> {
    this.cache.clear();
    this.unknown.clear();
    await this.options.db.notify(INVALIDATE_CHANNEL, 'keys');
  }

  /** A key was created: no process may keep refusing it as unknown. Called after the row is committed. */
  async keyCreated(): Promise<void> {
    this.unknown.clear();
    await this.options.db.notify(INVALIDATE_CHANNEL, KEY_CREATED);
  }

  async resolve(authorization: string | undefined): Promise<Principal> {
    const cached = this.resolveCached(authorization);
    if (cached) return cached;
    const hash = hashApiKey(keyValue(authorization));
    const nowMs = this.options.clock.now().getTime();
    const generation = this.cache.currentGeneration;
    const loaded = await this.load(hash);
    if (!loaded) {
      this.rememberUnknown(hash, nowMs);
      throw unauthorized('invalid API key', 'unknown');
    }
    // A row read before a revocation's notification arrived is not cached (set refuses it).
    this.cache.set(hash, loaded, nowMs, generation);
    return this.admit(loaded, nowMs);
  }

  /**
   * The synchronous half of resolve: the principal when the key is cached and fresh, undefined when the
   * database must be asked. Throws like resolve for missing, malformed and refused keys. The request hook
   * uses it so a cached key costs no promise on the hot path.
   */
  resolveCached(authorization: string | undefined): Principal | undefined {
    const value = presentedKey(authorization);
    const hash = hashApiKey(value);
    const entry = this.cache.get(hash);
    const nowMs = this.options.clock.now().getTime();
    // Only keys found in the database are cached, so a hit needs no shape or checksum check; a miss
    // still refuses a malformed key here, before anyone asks the database.
    if (!entry) {
      if (!isWellFormedApiKey(value)) throw unauthorized('malformed API key', 'malformed');
      const unknownSince = this.unknown.get(hash);
      if (unknownSince !== undefined) {
        if (nowMs - unknownSince <= this.unknownTtl) throw unauthorized('invalid API key', 'unknown');
        this.unknown.delete(hash);
      }
      return undefined;
    }
    return this.admit(entry, nowMs);
  }

  private rememberUnknown(hash: string, nowMs: number): void {
    this.unknown.delete(hash);
    if (this.unknown.size >= MAX_UNKNOWN) {
      const oldest = this.unknown.keys().next().value;
      if (oldest !== undefined) this.unknown.delete(oldest);
    }
    this.unknown.set(hash, nowMs);
  }

  private admit(entry: CachedKey, nowMs: number): Principal {
    this.check(entry, nowMs);
    this.lastUsed.set(entry.principal.keyId, nowMs);
    return entry.principal;
  }

  private check(entry: CachedKey, nowMs: number): void {
    if (entry.userStatus !== 'active')
      throw unauthorized(`API key owner is ${entry.userStatus}`, 'owner_inactive');
    if (entry.status === 'revoked') throw unauthorized('API key has been revoked', 'revoked');
    if (entry.status === 'rotated' && !(entry.graceUntil && entry.graceUntil.getTime() > nowMs)) {
      throw unauthorized('API key has been rotated; use its replacement', 'rotated');
    }
    const expiresAt = entry.principal.expiresAt;
    if (expiresAt && expiresAt.getTime() <= nowMs) throw unauthorized('API key has expired', 'expired');
  }

  private async load(hash: string): Promise<CachedKey | null> {
    const row = await this.options.db.prisma.apiKey.findUnique({ where: { hash }, include: KEY_ROW_INCLUDE });
    return row ? cachedKey(row) : null;
  }

  private async loadMany(hashes: string[]): Promise<Map<string, CachedKey>> {
    const rows = await this.options.db.prisma.apiKey.findMany({
      where: { hash: { in: hashes } },
      include: KEY_ROW_INCLUDE,
    });
    return new Map(rows.map((row) => [row.hash, cachedKey(row)]));
  }

  /** Writes pending last-used times; called on a timer, before key listings, and at shutdown. */
  async flushLastUsed(): Promise<void> {
    if (this.lastUsed.size === 0) return;
    const pending = [...this.lastUsed];
    this.lastUsed.clear();
    try {
      await this.options.db.sql.query(
        `UPDATE api_keys AS k SET last_used_at = GREATEST(COALESCE(k.last_used_at, v.at), v.at)
         FROM (SELECT unnest($1::text[]) AS id, unnest($2::timestamptz[]) AS at) AS v WHERE k.id = v.id`,
        [pending.map(([id]) => id), pending.map(([, at]) => new Date(at).toISOString())],
      );
    } catch (error) {
      // Put back for the next flush, unless a later use was recorded meanwhile.
      for (const [id, at] of pending) if ((this.lastUsed.get(id) ?? 0) < at) this.lastUsed.set(id, at);
      throw error;
    }
  }
}

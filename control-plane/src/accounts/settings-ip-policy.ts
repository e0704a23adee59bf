import { ApiError } from '@anvil/shared';
import type { Database } from '../db/index.ts';
import { IpRules } from '../proxy/ip-rules.ts';
import { RefreshedCache } from '../util/refreshed-cache.ts';

const CHANNEL = 'anvil_ip_policy_changed';
/**
 * The oldest an account's compiled list may be when it is enforced; every change also notifies every
 * process at once, so this bounds a missed notification only.
 */
const MAX_AGE_MS = 5_000;
/** The lists in use are re-read together this often, in one query, so none expires under a request. */
const REFRESH_MS = 2_500;

type Json = Record<string, unknown>;

/** The list an account enforces (security.api_access with require_ip_whitelist on), else null. */
export function enforcedList(settingsData: unknown): string[] | null {
  const apiAccess = ((settingsData as Json | null)?.['security'] as Json | undefined)?.['api_access'] as
    | Json
    | undefined;
  if (apiAccess?.['require_ip_whitelist'] !== true) return null;
  const list = apiAccess['ip_whitelist'];
  return Array.isArray(list) ? list.filter((entry): entry is string => typeof entry === 'string') : [];
}

export function ipNotAllowed(ip: string | null): ApiError {
  return new ApiError(
    'IP_NOT_ALLOWED',
    `address ${ip ?? 'unknown'} is not in the account's security.api_access.ip_whitelist`,
    { ip, setting: 'security.api_access.ip_whitelist' },
  );
}

/**
 * The account-wide address allowlist (security.api_access.ip_whitelist, in force while
 * require_ip_whitelist is true) as every entry point asks it: the API request guard, the port proxy, the
 * SSH relay and the web terminal. Compiled lists are cached per account so the guard stays synchronous
 * on a warm cache; a change to the settings drops the entry in every process (LISTEN/NOTIFY).
 */
export class AccountIpPolicy {
  private readonly cache: RefreshedCache<IpRules | null>;
  private readonly loading = new Map<string, Promise<IpRules | null>>();
  private unlisten: (() => Promise<void>) | null = null;

  constructor(private readonly db: Database) {
    this.cache = new RefreshedCache<IpRules | null>({
      name: 'account address list',
      loadMany: (accountIds) => this.loadMany(accountIds),
      refreshEveryMs: REFRESH_MS,
      maxAgeMs: MAX_AGE_MS,
      now: Date.now,
    });
  }

  async start(): Promise<void> {
    this.unlisten = await this.db.listen(CHANNEL, (accountId) => this.forget(accountId));
  }

  async stop(): Promise<void> {
    await this.unlisten?.();
    this.unlisten = null;
    await this.cache.stop();
  }

  private forget(accountId: string): void {
    this.cache.delete(accountId);
    this.loading.delete(accountId);
  }

  /** Called after an account's security settings were written. */
  async changed(accountId: string): Promise<void> {
    this.forget(accountId);
    await this.db.notify(CHANNEL, accountId);
  }

  /** Re-reads the lists in use now, in one query (what the background timer does every 2.5 s). */
  refreshCached(): Promise<void> {
    return this.cache.refresh();
  }

  /** null when `ip` may reach the account, else the refusal; synchronous when the list is cached. */
  admit(accountId: string, ip: string | null): ApiError | null | Promise<ApiError | null> {
    const rules = this.cache.get(accountId);
    if (rules !== undefined) return verdict(rules, ip);
    return this.rulesOf(accountId).then((rules) => verdict(rules, ip));
  }

  /** Throws IP_NOT_ALLOWED when `ip` may not reach the account. */
  async check(accountId: string, ip: string | null): Promise<void> {
    const refusal = await this.admit(accountId, ip);
    if (refusal) throw refusal;
  }

  private rulesOf(accountId: string): Promise<IpRules | null> {
    let pending = this.loading.get(accountId);
    if (!pending) {
      const generation = this.cache.currentGeneration;
      const readAt = Date.now();
      const load = this.loadMany([accountId])
        .then((found) => {
          const rules = found.get(accountId) ?? null;
          // A change while loading dropped this load: its (old) answer is not cached.
          if (this.loading.get(accountId) === load) this.cache.set(accountId, rules, readAt, generation);
          return rules;
        })
        .finally(() => {
          if (this.loading.get(accountId) === load) this.loading.delete(accountId);
        });
      this.loading.set(accountId, load);
      pending = load;
    }
    return pending;
  }

  /** The compiled list of every account asked for: null where it enforces none (most have no settings row). */
  private async loadMany(accountIds: string[]): Promise<Map<string, IpRules | null>> {
    const rows = await this.db.prisma.accountSettings.findMany({
      where: { accountId: { in: accountIds } },
      select: { accountId: true, data: true },
    });
    const found = new Map<string, IpRules | null>(accountIds.map((id) => [id, null]));
    for (const row of rows) {
      const list = enforcedList(row.data);
      found.set(row.accountId, list === null ? null : new IpRules(list));
    }
    return found;
  }
}

function verdict(rules: IpRules | null, ip: string | null): ApiError | null {
  if (rules === null) return null;
  return ip !== null && rules.matches(ip) ? null : ipNotAllowed(ip);
}

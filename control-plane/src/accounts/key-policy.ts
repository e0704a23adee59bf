import { ApiError } from '@anvil/shared';
import type { KeyPolicy } from '../auth/api-keys.ts';
import type { Clock } from '../auth/clock.ts';
import type { Principal } from '../auth/principal.ts';
import type { Database } from '../db/index.ts';
import type { AccessControl } from './access.ts';
import type { SettingsService } from './settings.ts';

/**
 * Member-level rules on API keys: a member holds at most the role's maxApiKeys and the account's
 * security.api_access.max_api_keys active keys; members see and manage their own keys, and members who
 * manage the team see and manage everyone's.
 */
export class MemberKeyPolicy implements KeyPolicy {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
    private readonly settings: SettingsService,
  ) {}

  private actor(caller: Principal) {
    return { principal: caller, ip: null };
  }

  async beforeCreate(caller: Principal): Promise<void> {
    const member = await this.access.caller(this.actor(caller));
    const now = this.clock.now();
    const active = await this.db.prisma.apiKey.count({
      where: {
        accountId: caller.accountId,
        userId: caller.userId,
        status: 'active',
        OR: [{ expiresAt: null }, { expiresAt: { gt: now } }],
      },
    });
    this.access.assertWithinLimit(member, 'maxApiKeys', active);
    const max = await this.settings.maxApiKeys(caller.accountId);
    if (active + 1 > max) {
      throw new ApiError('LIMIT_EXCEEDED', `this account allows at most ${max} active API keys per member`, {
        limit: 'max_api_keys',
        max,
        current: active,
        source: 'settings.security.api_access.max_api_keys',
      });
    }
  }

  async seesAllKeys(caller: Principal): Promise<boolean> {
    const member = await this.access.caller(this.actor(caller));
    return (await this.access.decide(member, 'manage_team', 'accounts')).allowed;
  }

  async assertCanManage(caller: Principal, _ownerUserId: string): Promise<void> {
    await this.access.require(this.actor(caller), {
      permission: 'manage_team',
      scope: 'accounts',
      action: 'manage_key_attempt',
    });
  }
}

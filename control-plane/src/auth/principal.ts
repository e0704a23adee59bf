import type { AccountTier, ApiKeyEnvironment, KeyPermission, KeyScope, KeyType } from '@anvil/shared';

/** Who is calling: resolved from the API key on every authenticated request. */
export interface Principal {
  keyId: string;
  accountId: string;
  userId: string;
  userRole: string;
  keyType: KeyType;
  environment: ApiKeyEnvironment;
  permissions: KeyPermission[];
  scopes: KeyScope[];
  expiresAt: Date | null;
  tier: AccountTier;
}

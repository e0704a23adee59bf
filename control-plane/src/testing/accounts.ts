import { KEY_SCOPES, type KeyPermission, type KeyScope, newId } from '@anvil/shared';
import type { TestApp } from './app.ts';

/** Test helpers for the accounts area: members with keys, a second account, JSON calls. */

export interface TestMember {
  userId: string;
  accountId: string;
  email: string;
  key: string;
  headers: { authorization: string };
}

export interface MemberOptions {
  role: string;
  email?: string;
  name?: string;
  department?: string | null;
  customPermissions?: string[];
  status?: string;
  accountId?: string;
  /** Key permissions and scopes: by default read+write on every scope, so only the role decides. */
  keyPermissions?: KeyPermission[];
  keyScopes?: KeyScope[];
}

let counter = 0;

/** Adds a member straight to the database (as accepting an invitation would) with an API key. */
export async function addMember(t: TestApp, options: MemberOptions): Promise<TestMember> {
  const accountId = options.accountId ?? t.accountId;
  const userId = newId('usr');
  counter += 1;
  const email = options.email ?? `member${counter}-${userId.slice(4, 10)}@example.com`;
  await t.context.db.prisma.user.create({
    data: {
      id: userId,
      accountId,
      email,
      name: options.name ?? `Member ${counter}`,
      role: options.role,
      status: options.status ?? 'active',
      department: options.department ?? null,
      customPermissions: options.customPermissions ?? [],
      joinedAt: t.context.clock.now(),
      createdAt: t.context.clock.now(),
    },
  });
  const { value } = await t.context.apiKeys.issue({
    accountId,
    userId,
    name: 'test key',
    permissions: options.keyPermissions ?? ['read', 'write'],
    scopes: options.keyScopes ?? [...KEY_SCOPES],
    environment: 'live',
    createdById: null,
  });
  return { userId, accountId, email, key: value, headers: { authorization: `Bearer ${value}` } };
}

/** A second account with its own owner and owner key, for isolation tests. */
export async function addAccount(t: TestApp, name = 'Other'): Promise<TestMember> {
  const accountId = newId('acc');
  await t.context.db.prisma.account.create({ data: { id: accountId, name, tier: 'enterprise' } });
  return addMember(t, { role: 'owner', accountId, name: `${name} owner` });
}

export interface CallOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  url: string;
  key?: string | TestMember;
  payload?: unknown;
  headers?: Record<string, string>;
}

/** One JSON API call; the key defaults to the bootstrap owner's. */
export async function call(t: TestApp, options: CallOptions) {
  const key = typeof options.key === 'object' ? options.key.key : (options.key ?? t.ownerKey);
  return t.app.inject({
    method: options.method ?? 'GET',
    url: options.url,
    headers: { authorization: `Bearer ${key}`, ...options.headers },
    ...(options.payload === undefined ? {} : { payload: options.payload as Record<string, unknown> }),
  });
}

/** An API key of the owner's (POST /v2/auth/api-keys); its value is shown this once. */
export async function createApiKey(
  t: TestApp,
  body: Record<string, unknown>,
): Promise<{ value: string; key: { id: string } }> {
  const res = await call(t, { method: 'POST', url: '/v2/auth/api-keys', payload: body });
  if (res.statusCode !== 201) throw new Error(`api key: ${res.body}`);
  return res.json();
}

/**
 * Raises the owner's rate limits tenfold for an hour (POST /v2/auth/temporary-boost): for files that
 * create more than a limit allows (POST /clusters: 20 an hour per account).
 */
export async function boostRateLimits(t: TestApp): Promise<void> {
  const boost = await call(t, {
    method: 'POST',
    url: '/v2/auth/temporary-boost',
    payload: { multiplier: 10, duration: '1h', reason: 'tests' },
  });
  if (boost.statusCode !== 201) throw new Error(`temporary boost: ${boost.body}`);
}

/** Registers a resource owned by a member, as the cluster and endpoint areas do when they create one. */
export async function addResource(t: TestApp, owner: TestMember | null, id: string, name = id) {
  const principal = await t.context.keys.resolve(`Bearer ${owner ? owner.key : t.ownerKey}`);
  return t.context.accounts.resources.register({ principal, ip: null }, { id, name });
}

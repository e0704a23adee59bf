import {
  ApiError,
  type ApiKeyEnvironment,
  displayPrefix,
  generateApiKey,
  hashApiKey,
  KEY_PERMISSIONS,
  KEY_SCOPES,
  type KeyPermission,
  type KeyScope,
  type KeyType,
  newId,
} from '@anvil/shared';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { ApiKey } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Clock } from './clock.ts';
import type { KeyResolver } from './key-resolver.ts';
import type { Principal } from './principal.ts';

export interface CreateKeyInput {
  name: string;
  permissions: string[];
  scopes?: string[] | undefined;
  expiresAt?: string | undefined;
  description?: string | undefined;
  type?: KeyType | undefined;
  environment?: ApiKeyEnvironment | undefined;
}

export type KeyStatus = 'active' | 'revoked' | 'rotated' | 'expired';

export interface KeyView {
  id: string;
  name: string;
  description: string | null;
  type: KeyType;
  environment: ApiKeyEnvironment;
  permissions: KeyPermission[];
  scopes: KeyScope[];
  prefix: string;
  status: KeyStatus;
  expiresAt: string | null;
  lastUsedAt: string | null;
  createdAt: string;
  revokedAt: string | null;
  rotatedAt: string | null;
  graceUntil: string | null;
  replacedBy: string | null;
  userId: string;
}

/** Longest grace period a rotation may keep the old value working. */
export const MAX_ROTATION_GRACE_SECONDS = 7 * 24 * 3600;

const iso = (date: Date | null) => (date ? date.toISOString() : null);

export function keyStatus(row: ApiKey, now: Date): KeyStatus {
  if (row.status === 'revoked') return 'revoked';
  if (row.status === 'rotated') return 'rotated';
  if (row.expiresAt && row.expiresAt.getTime() <= now.getTime()) return 'expired';
  return 'active';
}

export function viewKey(row: ApiKey, now: Date): KeyView {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    type: row.type as KeyType,
    environment: row.environment as ApiKeyEnvironment,
    permissions: row.permissions as KeyPermission[],
    scopes: row.scopes as KeyScope[],
    prefix: row.displayPrefix,
    status: keyStatus(row, now),
    expiresAt: iso(row.expiresAt),
    lastUsedAt: iso(row.lastUsedAt),
    createdAt: row.createdAt.toISOString(),
    revokedAt: iso(row.revokedAt),
    rotatedAt: iso(row.rotatedAt),
    graceUntil: iso(row.graceUntil),
    replacedBy: row.replacedById,
    userId: row.userId,
  };
}

function validatePermissions(permissions: string[]): KeyPermission[] {
  const invalid = permissions.filter((p) => !(KEY_PERMISSIONS as readonly string[]).includes(p));
  if (invalid.length > 0) {
    throw new ApiError('INVALID_PERMISSION', `unknown permission: ${invalid.join(', ')}`, {
      invalidPermissions: invalid,
      validPermissions: [...KEY_PERMISSIONS],
    });
  }
  if (permissions.length === 0) {
    throw new ApiError('VALIDATION_ERROR', 'permissions must name at least one permission', {
      field: 'permissions',
      reason: 'must not be empty',
    });
  }
  return [...new Set(permissions)] as KeyPermission[];
}

function validateScopes(scopes: string[]): KeyScope[] {
  const invalid = scopes.filter((s) => !(KEY_SCOPES as readonly string[]).includes(s));
  if (invalid.length > 0) {
    throw new ApiError('INVALID_SCOPE', `unknown scope: ${invalid.join(', ')}`, {
      invalidScopes: invalid,
      validScopes: [...KEY_SCOPES],
    });
  }
  return [...new Set(scopes)] as KeyScope[];
}

function typeFor(requested: KeyType | undefined, permissions: KeyPermission[]): KeyType {
  if (requested === 'service') return 'service';
  const derived: KeyType = permissions.includes('write') ? 'read_write' : 'read';
  if (requested && requested !== derived) {
    throw new ApiError(
      'VALIDATION_ERROR',
      `a ${requested} key cannot carry permissions [${permissions.join(', ')}]`,
      {
        field: 'type',
        reason:
          requested === 'read'
            ? 'a read key carries only the read permission'
            : 'a read_write key needs write',
      },
    );
  }
  return derived;
}

/** The rules that keep a key from minting a stronger one: no wider permissions, scopes, type or environment. */
function assertNoEscalation(
  caller: Principal,
  permissions: KeyPermission[],
  scopes: KeyScope[],
  type: KeyType,
  env: ApiKeyEnvironment,
) {
  const extraPermissions = permissions.filter((p) => !caller.permissions.includes(p));
  const extraScopes = scopes.filter((s) => !caller.scopes.includes(s));
  if (extraPermissions.length > 0 || extraScopes.length > 0) {
    throw new ApiError(
      'INSUFFICIENT_PERMISSIONS',
      'a key cannot create a key with more permissions or scopes than it has',
      {
        attemptedPermissions: extraPermissions,
        attemptedScopes: extraScopes,
        callerPermissions: caller.permissions,
        callerScopes: caller.scopes,
      },
    );
  }
  if (caller.keyType === 'service' && type !== 'service') {
    throw new ApiError('INSUFFICIENT_PERMISSIONS', 'a service key can only create service keys', {
      attemptedType: type,
      callerType: caller.keyType,
    });
  }
  if (caller.environment === 'test' && env === 'live') {
    throw new ApiError('INSUFFICIENT_PERMISSIONS', 'a test key cannot create live keys', {
      attemptedEnvironment: env,
      callerEnvironment: caller.environment,
    });
  }
}

/**
 * Member-level rules on keys, supplied by the accounts domain (accounts/key-policy.ts): how many keys a
 * member may hold, and who sees and manages whose keys.
 */
export interface KeyPolicy {
  /** Throws when the caller may not create one more key (role maxApiKeys, settings max_api_keys). */
  beforeCreate(caller: Principal): Promise<void>;
  /** True when the caller sees every key of the account, not only its own. */
  seesAllKeys(caller: Principal): Promise<boolean>;
  /** Throws when the caller may not revoke or rotate a key of `ownerUserId`. */
  assertCanManage(caller: Principal, ownerUserId: string): Promise<void>;
}

export interface IssueKeyInput {
  accountId: string;
  userId: string;
  name: string;
  description?: string | null | undefined;
  permissions: KeyPermission[];
  scopes: KeyScope[];
  environment: ApiKeyEnvironment;
  createdById: string | null;
}

export class ApiKeyService {
  private policy: KeyPolicy | null = null;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly resolver: KeyResolver,
    private readonly revocations: AccessRevocations,
  ) {}

  setPolicy(policy: KeyPolicy): void {
    this.policy = policy;
  }

  /** A key for a member, made by the system rather than by another key (invitation acceptance). */
  async issue(input: IssueKeyInput): Promise<{ key: KeyView; value: string }> {
    const value = generateApiKey(input.environment);
    const now = this.clock.now();
    const row = await this.db.prisma.apiKey.create({
      data: {
        id: newId('key'),
        accountId: input.accountId,
        userId: input.userId,
        name: input.name,
        description: input.description ?? null,
        type: input.permissions.includes('write') ? 'read_write' : 'read',
        environment: input.environment,
        permissions: input.permissions,
        scopes: input.scopes,
        displayPrefix: displayPrefix(value),
        hash: hashApiKey(value),
        createdById: input.createdById,
        createdAt: now,
      },
    });
    await this.resolver.keyCreated();
    return { key: viewKey(row, now), value };
  }

  async create(caller: Principal, input: CreateKeyInput): Promise<{ key: KeyView; value: string }> {
    const permissions = validatePermissions(input.permissions);
    const scopes = validateScopes(input.scopes ?? caller.scopes);
    const type = typeFor(input.type, permissions);
    const environment = input.environment ?? caller.environment;
    const now = this.clock.now();
    let expiresAt: Date | null = null;
    if (input.expiresAt !== undefined) {
      expiresAt = new Date(input.expiresAt);
      if (Number.isNaN(expiresAt.getTime()) || expiresAt.getTime() <= now.getTime()) {
        throw new ApiError('VALIDATION_ERROR', 'expiresAt must be an ISO 8601 time in the future', {
          field: 'expiresAt',
          reason: 'must be in the future',
        });
      }
    }
    assertNoEscalation(caller, permissions, scopes, type, environment);
    await this.policy?.beforeCreate(caller);
    // A key never outlives the key that made it: otherwise an expiring key could extend its own life.
    if (caller.expiresAt && (!expiresAt || expiresAt > caller.expiresAt)) expiresAt = caller.expiresAt;

    const value = generateApiKey(environment);
    const row = await this.db.prisma.apiKey.create({
      data: {
        id: newId('key'),
        accountId: caller.accountId,
        userId: caller.userId,
        name: input.name,
        description: input.description ?? null,
        type,
        environment,
        permissions,
        scopes,
        displayPrefix: displayPrefix(value),
        hash: hashApiKey(value),
        expiresAt,
        createdById: caller.keyId,
        createdAt: now,
      },
    });
    await this.resolver.keyCreated();
    return { key: viewKey(row, now), value };
  }

  async list(caller: Principal): Promise<KeyView[]> {
    await this.resolver.flushLastUsed();
    const all = this.policy ? await this.policy.seesAllKeys(caller) : true;
    const rows = await this.db.prisma.apiKey.findMany({
      where: { accountId: caller.accountId, ...(all ? {} : { userId: caller.userId }) },
      orderBy: { createdAt: 'desc' },
    });
    const now = this.clock.now();
    return rows.map((row) => viewKey(row, now));
  }

  private async find(caller: Principal, keyId: string): Promise<ApiKey> {
    const row = await this.db.prisma.apiKey.findFirst({ where: { id: keyId, accountId: caller.accountId } });
    if (!row) throw new ApiError('API_KEY_NOT_FOUND', `no API key ${keyId} in this account`, { keyId });
    if (row.userId !== caller.userId) await this.policy?.assertCanManage(caller, row.userId);
    return row;
  }

  async revoke(caller: Principal, keyId: string): Promise<KeyView> {
    const row = await this.find(caller, keyId);
    const now = this.clock.now();
    const updated =
      row.status === 'revoked'
        ? row
        : await this.db.prisma.apiKey.update({
            where: { id: row.id },
            // A rotated key still inside its grace period stops at once too.
            data: { status: 'revoked', revokedAt: now, graceUntil: null },
          });
    await this.resolver.invalidate();
    // Sessions opened with the key (proxy cookies, terminals, log streams) end in every process.
    await this.revocations.publish({ accountId: row.accountId, reason: 'key_revoked', keyId: row.id });
    return viewKey(updated, now);
  }

  async rotate(
    caller: Principal,
    keyId: string,
    graceSeconds: number,
  ): Promise<{ key: KeyView; value: string; previous: KeyView }> {
    const old = await this.find(caller, keyId);
    const now = this.clock.now();
    const status = keyStatus(old, now);
    if (status !== 'active') {
      throw new ApiError('CONFLICT', `only an active key can be rotated; ${keyId} is ${status}`, {
        keyId,
        status,
      });
    }
    if (graceSeconds < 0 || graceSeconds > MAX_ROTATION_GRACE_SECONDS) {
      throw new ApiError('VALIDATION_ERROR', `grace_period_seconds must be 0-${MAX_ROTATION_GRACE_SECONDS}`, {
        field: 'grace_period_seconds',
        reason: `must be between 0 and ${MAX_ROTATION_GRACE_SECONDS}`,
      });
    }
    const value = generateApiKey(old.environment as ApiKeyEnvironment);
    const newKeyId = newId('key');
    const graceUntil = graceSeconds > 0 ? new Date(now.getTime() + graceSeconds * 1000) : null;
    const [created, previous] = await this.db.prisma.$transaction([
      this.db.prisma.apiKey.create({
        data: {
          id: newKeyId,
          accountId: old.accountId,
          userId: old.userId,
          name: old.name,
          description: old.description,
          type: old.type,
          environment: old.environment,
          permissions: old.permissions,
          scopes: old.scopes,
          displayPrefix: displayPrefix(value),
          hash: hashApiKey(value),
          expiresAt: old.expiresAt,
          createdById: caller.keyId,
          createdAt: now,
        },
      }),
      this.db.prisma.apiKey.update({
        where: { id: old.id },
        data: { status: 'rotated', rotatedAt: now, graceUntil, replacedById: newKeyId },
      }),
    ]);
    await this.resolver.invalidate();
    return { key: viewKey(created, now), value, previous: viewKey(previous, now) };
  }
}

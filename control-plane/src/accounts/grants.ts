import { ApiError, newId } from '@anvil/shared';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { Clock } from '../auth/clock.ts';
import type { PermissionGrant } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { AccessControl, Actor } from './access.ts';
import type { AuditLog } from './audit.ts';
import { checkFuture, checkPermissions, checkScopes } from './validation.ts';

export interface GrantInput {
  permissions: string[];
  scopes: string[];
  resources?: string[] | undefined;
  expiresAt?: string | undefined;
  reason?: string | undefined;
}

const iso = (date: Date | null) => (date ? date.toISOString() : null);

export function viewGrant(row: PermissionGrant, now: Date) {
  const expired = row.status === 'active' && row.expiresAt !== null && row.expiresAt <= now;
  return {
    id: row.id,
    userId: row.userId,
    permissions: row.permissions,
    scopes: row.scopes,
    resources: row.resources,
    expiresAt: iso(row.expiresAt),
    reason: row.reason,
    grantedBy: row.grantedById,
    grantedAt: row.grantedAt.toISOString(),
    /** `expired` is derived: an active grant past its expiresAt no longer counts. */
    status: expired ? 'expired' : row.status,
    revokedBy: row.revokedById,
    revokedAt: iso(row.revokedAt),
  };
}

const MANAGE_TEAM = { permission: 'manage_team', scope: 'accounts' } as const;

/** Grants: permissions given to one member beyond the role, never above the giver's own. */
export class GrantService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
    private readonly audit: AuditLog,
    private readonly revocations: AccessRevocations,
  ) {}

  async grant(actor: Actor, userId: string, input: GrantInput) {
    const member = await this.access.require(actor, { ...MANAGE_TEAM, action: 'grant_attempt' });
    const target = await this.db.prisma.user.findFirst({
      where: { id: userId, accountId: member.accountId, status: { not: 'removed' } },
    });
    if (!target) throw new ApiError('MEMBER_NOT_FOUND', `no member ${userId} in this account`, { userId });
    const permissions = checkPermissions(input.permissions);
    const scopes = checkScopes(input.scopes);
    const resources = [...new Set(input.resources ?? [])];
    for (const id of resources) {
      if (!(await this.access.findResource(member.accountId, id))) {
        throw new ApiError('RESOURCE_NOT_FOUND', `no resource ${id} in this account`, { resourceId: id });
      }
    }
    const now = this.clock.now();
    const expiresAt = input.expiresAt === undefined ? null : checkFuture(input.expiresAt, now, 'expiresAt');
    await this.access.assertCanConfer(member, permissions, scopes, resources);
    const row = await this.db.prisma.permissionGrant.create({
      data: {
        id: newId('grant'),
        accountId: member.accountId,
        userId,
        permissions,
        scopes,
        resources,
        reason: input.reason ?? null,
        expiresAt,
        grantedById: member.userId,
        grantedAt: now,
      },
    });
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'permission_granted',
      actor: { userId: member.userId, ip: actor.ip },
      target: { userId, name: target.name ?? target.email },
      details: {
        grantId: row.id,
        permissions,
        scopes,
        resources,
        expiresAt: iso(expiresAt),
        reason: input.reason ?? null,
      },
    });
    return viewGrant(row, now);
  }

  async revoke(actor: Actor, grantId: string) {
    const member = await this.access.require(actor, { ...MANAGE_TEAM, action: 'revoke_attempt' });
    const row = await this.db.prisma.permissionGrant.findFirst({
      where: { id: grantId, accountId: member.accountId },
    });
    if (!row) throw new ApiError('GRANT_NOT_FOUND', `no grant ${grantId} in this account`, { grantId });
    const now = this.clock.now();
    if (row.status === 'revoked') return viewGrant(row, now);
    const updated = await this.db.prisma.permissionGrant.update({
      where: { id: row.id },
      data: { status: 'revoked', revokedById: member.userId, revokedAt: now },
    });
    await this.revocations.publish({
      accountId: member.accountId,
      reason: 'grant_revoked',
      userId: row.userId,
    });
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'permission_revoked',
      actor: { userId: member.userId, ip: actor.ip },
      target: { userId: row.userId },
      details: { grantId, permissions: row.permissions, scopes: row.scopes, resources: row.resources },
    });
    return viewGrant(updated, now);
  }

  async list(actor: Actor, filter: { userId?: string | undefined; status?: string | undefined }) {
    const member = await this.access.caller(actor);
    // Members see their own grants; managers see everyone's.
    const manages = (await this.access.decide(member, 'manage_team', 'accounts')).allowed;
    const userId = manages ? filter.userId : member.userId;
    if (!manages && filter.userId && filter.userId !== member.userId) {
      await this.access.require(actor, { ...MANAGE_TEAM, action: 'list_grants_attempt' });
    }
    const rows = await this.db.prisma.permissionGrant.findMany({
      where: {
        accountId: member.accountId,
        ...(userId ? { userId } : {}),
        ...(filter.status === 'active' || filter.status === 'revoked' ? { status: filter.status } : {}),
      },
      orderBy: { grantedAt: 'desc' },
    });
    const now = this.clock.now();
    return rows.map((row) => viewGrant(row, now));
  }
}

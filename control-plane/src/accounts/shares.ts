import { ApiError, newId } from '@anvil/shared';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { Clock } from '../auth/clock.ts';
import type { ResourceShare } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { AccessControl, Actor } from './access.ts';
import type { ActivityTracker } from './activity.ts';
import type { AuditLog } from './audit.ts';
import { RESOURCE_PERMISSIONS, scopeOfResourceType } from './roles.ts';
import { checkFuture, checkPermissions, validationError } from './validation.ts';

export interface ShareInput {
  users: string[];
  /** Departments: every current member of each is shared with. */
  teams?: string[] | undefined;
  permissions: string[];
  expiresAt?: string | undefined;
  message?: string | undefined;
}

export function viewShare(row: ResourceShare, now: Date) {
  const expired = row.status === 'active' && row.expiresAt !== null && row.expiresAt <= now;
  return {
    id: row.id,
    resourceId: row.resourceId,
    userId: row.userId,
    permissions: row.permissions,
    sharedAt: row.sharedAt.toISOString(),
    sharedBy: row.sharedById,
    expiresAt: row.expiresAt ? row.expiresAt.toISOString() : null,
    status: expired ? 'expired' : row.status,
    revokedAt: row.revokedAt ? row.revokedAt.toISOString() : null,
  };
}

/**
 * Resource shares: the owner of a resource (or a member who manages the team) gives teammates
 * permissions on it, never more than the giver holds there. One active share per resource and member:
 * sharing again replaces its permissions and expiry.
 */
export class ShareService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
    private readonly audit: AuditLog,
    private readonly activity: ActivityTracker,
    private readonly revocations: AccessRevocations,
  ) {}

  async share(actor: Actor, resourceId: string, input: ShareInput) {
    const member = await this.access.caller(actor);
    const resource = await this.access.findResource(member.accountId, resourceId);
    if (!resource) {
      throw new ApiError('RESOURCE_NOT_FOUND', `no resource ${resourceId} in this account`, { resourceId });
    }
    if (resource.ownerId !== member.userId) {
      await this.access.require(actor, {
        permission: 'manage_team',
        scope: 'accounts',
        action: 'share_attempt',
      });
    }
    const permissions = checkPermissions(input.permissions, RESOURCE_PERMISSIONS);
    const now = this.clock.now();
    const expiresAt = input.expiresAt === undefined ? null : checkFuture(input.expiresAt, now, 'expiresAt');
    await this.access.assertCanConfer(
      member,
      permissions,
      [scopeOfResourceType(resource.type)],
      [resource.id],
    );

    const targets = new Set<string>();
    if (input.users.length > 0) {
      const found = await this.db.prisma.user.findMany({
        where: { accountId: member.accountId, id: { in: input.users }, status: { not: 'removed' } },
        select: { id: true },
      });
      const known = new Set(found.map((u) => u.id));
      const missing = input.users.find((id) => !known.has(id));
      if (missing) {
        throw new ApiError('MEMBER_NOT_FOUND', `no member ${missing} in this account`, { userId: missing });
      }
      for (const id of input.users) targets.add(id);
    }
    for (const team of input.teams ?? []) {
      const inTeam = await this.db.prisma.user.findMany({
        where: { accountId: member.accountId, department: team, status: { not: 'removed' } },
        select: { id: true },
      });
      if (inTeam.length === 0) throw validationError('teams', `no member is in the department "${team}"`);
      for (const u of inTeam) targets.add(u.id);
    }
    targets.delete(resource.ownerId);
    if (targets.size === 0) throw validationError('users', 'names nobody to share with besides the owner');

    const shares = await this.db.prisma.$transaction(async (tx) => {
      const out: ResourceShare[] = [];
      for (const userId of targets) {
        const existing = await tx.resourceShare.findFirst({
          where: { accountId: member.accountId, resourceId, userId, status: 'active' },
        });
        const data = {
          permissions,
          expiresAt,
          message: input.message ?? null,
          sharedById: member.userId,
          sharedAt: now,
        };
        out.push(
          existing
            ? await tx.resourceShare.update({ where: { id: existing.id }, data })
            : await tx.resourceShare.create({
                data: { id: newId('share'), accountId: member.accountId, resourceId, userId, ...data },
              }),
        );
      }
      return out;
    });
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'resource_shared',
      actor: { userId: member.userId, ip: actor.ip },
      resource: { type: resource.type, id: resource.id, name: resource.name },
      details: {
        users: [...targets],
        teams: input.teams ?? [],
        permissions,
        expiresAt: expiresAt?.toISOString(),
      },
    });
    await this.activity.recordMany(
      [member.userId, ...targets].map((userId) => ({
        accountId: member.accountId,
        userId,
        kind: 'collaboration' as const,
        resourceType: resource.type,
        resourceId: resource.id,
      })),
    );
    return {
      resourceId,
      shares: shares.map((row) => viewShare(row, now)),
      message: `${resource.type} ${resource.name} shared with ${shares.length} member${shares.length === 1 ? '' : 's'}`,
    };
  }

  async list(actor: Actor, resourceId: string) {
    const member = await this.access.caller(actor);
    const resource = await this.access.findResource(member.accountId, resourceId);
    if (!resource) {
      throw new ApiError('RESOURCE_NOT_FOUND', `no resource ${resourceId} in this account`, { resourceId });
    }
    await this.access.require(actor, {
      permission: 'read',
      scope: scopeOfResourceType(resource.type),
      resourceId,
    });
    const rows = await this.db.prisma.resourceShare.findMany({
      where: { accountId: member.accountId, resourceId, status: 'active' },
      orderBy: { sharedAt: 'asc' },
    });
    const now = this.clock.now();
    return { resourceId, shares: rows.map((row) => viewShare(row, now)) };
  }

  async revoke(actor: Actor, shareId: string) {
    const member = await this.access.caller(actor);
    const row = await this.db.prisma.resourceShare.findFirst({
      where: { id: shareId, accountId: member.accountId },
    });
    if (!row) throw new ApiError('SHARE_NOT_FOUND', `no share ${shareId} in this account`, { shareId });
    const resource = await this.access.findResource(member.accountId, row.resourceId);
    if (resource?.ownerId !== member.userId && row.sharedById !== member.userId) {
      await this.access.require(actor, {
        permission: 'manage_team',
        scope: 'accounts',
        action: 'share_revoke_attempt',
      });
    }
    const now = this.clock.now();
    if (row.status === 'revoked') return viewShare(row, now);
    const updated = await this.db.prisma.resourceShare.update({
      where: { id: row.id },
      data: { status: 'revoked', revokedById: member.userId, revokedAt: now },
    });
    // The member's open sessions on the resource are re-checked and end unless other access remains.
    await this.revocations.publish({
      accountId: member.accountId,
      reason: 'share_revoked',
      userId: row.userId,
      resourceId: row.resourceId,
    });
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'share_revoked',
      actor: { userId: member.userId, ip: actor.ip },
      target: { userId: row.userId },
      resource: resource ? { type: resource.type, id: resource.id, name: resource.name } : undefined,
      details: { shareId, permissions: row.permissions },
    });
    return viewShare(updated, now);
  }
}

import { ApiError } from '@anvil/shared';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { Clock } from '../auth/clock.ts';
import type { KeyResolver } from '../auth/key-resolver.ts';
import type { User } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { type AccessControl, type Actor, holds, type MemberAccess } from './access.ts';
import type { ActivityTracker } from './activity.ts';
import { checkAssignableRole } from './assign.ts';
import type { AuditLog } from './audit.ts';
import { isPending, viewMember, viewPendingMember } from './member-views.ts';
import { BUILT_IN_ROLE_NAMES } from './roles.ts';
import { checkPermissions, validationError } from './validation.ts';
import { enqueueWebhookEvent, MEMBER_REMOVED_EVENT } from './webhook-outbox.ts';

export interface MemberPatch {
  role?: string | undefined;
  permissions?: string[] | undefined;
  department?: string | null | undefined;
  title?: string | null | undefined;
  status?: 'active' | 'suspended' | undefined;
}

export const BULK_OPERATIONS = ['update_role', 'update_department', 'suspend', 'reactivate'] as const;
export type BulkOperation = (typeof BULK_OPERATIONS)[number];

const MANAGE_TEAM = { permission: 'manage_team', scope: 'accounts' } as const;

/**
 * The team: members (active, suspended) and pending invitations; member changes. Only members who
 * manage the team (owner, admin, or a role or grant with manage_team) change anyone, never someone whose
 * role reaches beyond their own, never the owner's role or status, and never their own role or status.
 * Suspending or removing a member stops their keys at once (the key resolver checks the member's
 * status, and its cache is invalidated in every process).
 */
export class TeamService {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      access: AccessControl;
      audit: AuditLog;
      keys: KeyResolver;
      revocations: AccessRevocations;
      activity: ActivityTracker;
      publicUrl: string;
    },
  ) {}

  async list(actor: Actor) {
    const { db, access, clock } = this.deps;
    const member = await access.caller(actor);
    const [users, invitations] = await Promise.all([
      db.prisma.user.findMany({
        where: { accountId: member.accountId, status: { in: ['active', 'suspended'] } },
        orderBy: { createdAt: 'asc' },
      }),
      db.prisma.invitation.findMany({
        where: { accountId: member.accountId, status: { in: ['sent', 'resent'] } },
        orderBy: { createdAt: 'asc' },
      }),
    ]);
    const accessById = await access.loadMany(member.accountId, users);
    const now = clock.now();
    const pending = invitations.filter((row) => isPending(row, now));
    const roles: Record<string, number> = Object.fromEntries(BUILT_IN_ROLE_NAMES.map((name) => [name, 0]));
    for (const user of users) roles[user.role] = (roles[user.role] ?? 0) + 1;
    roles['pending'] = pending.length;
    const members = [
      ...users.map((user) => viewMember(user, accessById.get(user.id), this.deps.publicUrl)),
      ...pending.map(viewPendingMember),
    ];
    return { members, total: members.length, roles };
  }

  private async findUser(accountId: string, userId: string): Promise<User> {
    const user = await this.deps.db.prisma.user.findFirst({
      where: { id: userId, accountId, status: { not: 'removed' } },
    });
    if (!user) throw new ApiError('MEMBER_NOT_FOUND', `no member ${userId} in this team`, { userId });
    return user;
  }

  async get(actor: Actor, userId: string) {
    const { db, access, clock } = this.deps;
    const member = await access.caller(actor);
    if (userId.startsWith('inv_')) {
      const row = await db.prisma.invitation.findFirst({
        where: { id: userId, accountId: member.accountId },
      });
      if (!row || !isPending(row, clock.now())) {
        throw new ApiError('MEMBER_NOT_FOUND', `no member ${userId} in this team`, { userId });
      }
      return {
        ...viewPendingMember(row),
        activity: { endpointsCreated: 0, clustersManaged: 0, totalExecutions: 0, lastLogin: null },
        resources: { ownedEndpoints: 0, ownedClusters: 0, sharedEndpoints: 0 },
      };
    }
    const user = await this.findUser(member.accountId, userId);
    const targetAccess = await access.load(member.accountId, user.id);
    const detail = await this.deps.activity.member(member.accountId, user.id, user.lastActiveAt);
    return { ...viewMember(user, targetAccess ?? undefined, this.deps.publicUrl), ...detail };
  }

  /** The caller must reach at least as far as the target's role to change or remove them. */
  private async assertOutranks(manager: MemberAccess, target: User): Promise<void> {
    const resolved = await this.deps.access.resolveRoleOf(target.accountId, target.role);
    await this.deps.access.assertCanConfer(manager, [...resolved.permissions], [...resolved.scopes]);
  }

  async update(actor: Actor, userId: string, patch: MemberPatch) {
    const manager = await this.deps.access.require(actor, {
      ...MANAGE_TEAM,
      action: 'member_update_attempt',
    });
    return this.applyUpdate(actor, manager, userId, patch);
  }

  private async applyUpdate(actor: Actor, manager: MemberAccess, userId: string, patch: MemberPatch) {
    const { db, clock, access, audit } = this.deps;
    const target = await this.findUser(manager.accountId, userId);
    const changesAccess =
      patch.role !== undefined || patch.status !== undefined || patch.permissions !== undefined;
    if (changesAccess && target.role === 'owner') {
      throw new ApiError(
        'CANNOT_MODIFY_MEMBER',
        "the owner's role, permissions and status cannot be changed",
        {
          userId,
          role: 'owner',
        },
      );
    }
    if (changesAccess && target.id === manager.userId) {
      throw new ApiError(
        'CANNOT_MODIFY_MEMBER',
        'members cannot change their own role, permissions or status',
        {
          userId,
          role: target.role,
        },
      );
    }
    if (changesAccess) await this.assertOutranks(manager, target);
    const role = patch.role ?? target.role;
    const resolved =
      patch.role !== undefined
        ? await checkAssignableRole(access, manager, patch.role)
        : await access.resolveRoleOf(manager.accountId, role);
    let customPermissions = target.customPermissions;
    if (patch.permissions !== undefined) {
      customPermissions = checkPermissions(patch.permissions);
      await access.assertCanConfer(manager, customPermissions, [...resolved.scopes]);
    }
    if (patch.status === 'active' && target.status !== 'suspended' && target.status !== 'active') {
      throw validationError('status', `a ${target.status} member cannot be reactivated`);
    }
    const now = clock.now();
    const updated = await db.prisma.user.update({
      where: { id: target.id },
      data: {
        role,
        customPermissions,
        ...(patch.department !== undefined ? { department: patch.department } : {}),
        ...(patch.title !== undefined ? { title: patch.title } : {}),
        ...(patch.status === 'suspended' && target.status !== 'suspended'
          ? { status: 'suspended', suspendedAt: now }
          : {}),
        ...(patch.status === 'active' && target.status === 'suspended'
          ? { status: 'active', suspendedAt: null }
          : {}),
      },
    });
    const actorRef = { userId: manager.userId, ip: actor.ip };
    const targetRef = { userId: target.id, name: target.name ?? target.email };
    if (role !== target.role) {
      await audit.record({
        accountId: manager.accountId,
        type: 'role_assignment',
        action: 'role_updated',
        actor: actorRef,
        target: targetRef,
        details: { oldRole: target.role, newRole: role },
      });
    }
    if (patch.permissions !== undefined && !sameSet(customPermissions, target.customPermissions)) {
      await audit.record({
        accountId: manager.accountId,
        type: 'permission_change',
        action: 'custom_permissions_updated',
        actor: actorRef,
        target: targetRef,
        details: { oldPermissions: target.customPermissions, newPermissions: customPermissions },
      });
    }
    if (updated.status !== target.status) {
      await audit.record({
        accountId: manager.accountId,
        type: 'permission_change',
        action: updated.status === 'suspended' ? 'member_suspended' : 'member_reactivated',
        actor: actorRef,
        target: targetRef,
        details: { oldStatus: target.status, newStatus: updated.status },
      });
    }
    if (role !== target.role || updated.status !== target.status) {
      // Every process drops its cached view of the member's keys: a suspension stops them now.
      await this.deps.keys.invalidate();
      // Open sessions (proxy cookies, SSH, terminals, log streams) are re-checked and end without access.
      await this.deps.revocations.publish({
        accountId: manager.accountId,
        reason: updated.status === 'suspended' ? 'member_suspended' : 'member_changed',
        userId: target.id,
      });
      this.deps.activity.forget(target.id);
    }
    const changed =
      role !== target.role ||
      updated.status !== target.status ||
      !sameSet(customPermissions, target.customPermissions) ||
      updated.department !== target.department ||
      updated.title !== target.title;
    const targetAccess = await access.load(manager.accountId, target.id);
    return { member: viewMember(updated, targetAccess ?? undefined, this.deps.publicUrl), changed };
  }

  async remove(actor: Actor, userId: string) {
    const { db, clock, access, audit } = this.deps;
    const manager = await access.require(actor, { ...MANAGE_TEAM, action: 'member_remove_attempt' });
    const target = await this.findUser(manager.accountId, userId);
    if (target.role === 'owner') {
      throw new ApiError('CANNOT_REMOVE_OWNER', 'the account owner cannot be removed', {
        userId,
        role: 'owner',
      });
    }
    if (target.id !== manager.userId) await this.assertOutranks(manager, target);
    const now = clock.now();
    await db.prisma.$transaction([
      db.prisma.user.update({
        where: { id: target.id },
        data: { status: 'removed', removedAt: now, suspendedAt: null },
      }),
      db.prisma.apiKey.updateMany({
        where: { accountId: manager.accountId, userId: target.id, status: { not: 'revoked' } },
        data: { status: 'revoked', revokedAt: now, graceUntil: null },
      }),
      db.prisma.permissionGrant.updateMany({
        where: { accountId: manager.accountId, userId: target.id, status: 'active' },
        data: { status: 'revoked', revokedAt: now, revokedById: manager.userId },
      }),
      db.prisma.resourceShare.updateMany({
        where: { accountId: manager.accountId, userId: target.id, status: 'active' },
        data: { status: 'revoked', revokedAt: now, revokedById: manager.userId },
      }),
      enqueueWebhookEvent(db.prisma, {
        accountId: manager.accountId,
        type: MEMBER_REMOVED_EVENT,
        data: {
          user_id: target.id,
          email: target.email,
          name: target.name,
          role: target.role,
          removed_by: manager.userId,
          removed_at: now.toISOString(),
        },
      }),
    ]);
    await this.deps.keys.invalidate();
    await this.deps.revocations.publish({
      accountId: manager.accountId,
      reason: 'member_removed',
      userId: target.id,
    });
    this.deps.activity.forget(target.id);
    await audit.record({
      accountId: manager.accountId,
      type: 'permission_change',
      action: 'member_removed',
      actor: { userId: manager.userId, ip: actor.ip },
      target: { userId: target.id, name: target.name ?? target.email },
      details: { role: target.role, reason: 'removed from the team: keys, grants and shares revoked' },
    });
    return {
      id: target.id,
      status: 'removed' as const,
      removedAt: now.toISOString(),
      message: `${target.email} was removed; their API keys, grants and shares are revoked`,
    };
  }

  /**
   * One operation on many members, each judged on its own: a failure for one (owner, unknown id,
   * role beyond the caller) is reported in its result and does not stop the others.
   */
  async bulk(actor: Actor, operation: BulkOperation, userIds: string[], data: Record<string, unknown>) {
    const manager = await this.deps.access.require(actor, { ...MANAGE_TEAM, action: 'bulk_update_attempt' });
    let patch: MemberPatch;
    switch (operation) {
      case 'update_role': {
        if (typeof data['role'] !== 'string')
          throw validationError('data.role', 'is required for update_role');
        patch = { role: data['role'] };
        break;
      }
      case 'update_department': {
        const department = data['department'];
        if (department !== null && typeof department !== 'string') {
          throw validationError('data.department', 'is required for update_department (a string or null)');
        }
        if (typeof department === 'string' && department.length > 100) {
          throw validationError('data.department', 'must NOT have more than 100 characters');
        }
        patch = { department };
        break;
      }
      case 'suspend':
        patch = { status: 'suspended' };
        break;
      case 'reactivate':
        patch = { status: 'active' };
        break;
    }
    const results: {
      userId: string;
      status: 'success' | 'failed';
      updated: boolean;
      memberStatus?: string;
      error?: { code: string; message: string };
    }[] = [];
    for (const userId of [...new Set(userIds)]) {
      try {
        if (operation === 'reactivate') {
          const current = await this.findUser(manager.accountId, userId);
          if (current.status !== 'suspended') {
            results.push({ userId, status: 'success', updated: false, memberStatus: current.status });
            continue;
          }
        }
        const { member, changed } = await this.applyUpdate(actor, manager, userId, patch);
        results.push({ userId, status: 'success', updated: changed, memberStatus: member.status });
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        results.push({
          userId,
          status: 'failed',
          updated: false,
          error: { code: error.code, message: error.message },
        });
      }
    }
    const successful = results.filter((r) => r.status === 'success').length;
    return {
      operation,
      results,
      summary: { total: results.length, successful, failed: results.length - successful },
    };
  }

  async activity(actor: Actor, period: string | undefined) {
    const member = await this.deps.access.caller(actor);
    return this.deps.activity.team(member.accountId, period);
  }

  /** True when the member manages the team (used by listings that show more to managers). */
  manages(member: MemberAccess): boolean {
    return holds(member, 'manage_team', 'accounts') !== null;
  }
}

function sameSet(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((x) => b.includes(x));
}

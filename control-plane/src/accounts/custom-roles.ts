import { ApiError } from '@anvil/shared';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { Clock } from '../auth/clock.ts';
import type { KeyResolver } from '../auth/key-resolver.ts';
import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { type AccessControl, type Actor, holds, type MemberAccess, toRoleDefinition } from './access.ts';
import type { AuditLog } from './audit.ts';
import {
  BUILT_IN_ROLES,
  customRoleId,
  isBuiltInRole,
  LIMITATION_NAMES,
  type Limitations,
  PERMISSION_DESCRIPTIONS,
  type RoleDefinition,
  resolveRole,
  roleLookup,
  SCOPE_DESCRIPTIONS,
} from './roles.ts';
import { checkPermissions, checkScopes, validationError } from './validation.ts';

export interface RoleInput {
  name: string;
  displayName: string;
  description?: string | null | undefined;
  permissions: string[];
  scopes: string[];
  limitations?: Limitations | undefined;
  inherits?: string[] | undefined;
  assignable?: boolean | undefined;
}

export type RolePatch = Partial<Omit<RoleInput, 'name'>>;

export const ROLE_NAME_PATTERN = /^[a-z][a-z0-9_-]{1,47}$/;

export function viewRole(role: RoleDefinition) {
  const limits = role.limitations;
  return {
    id: role.id,
    name: role.name,
    displayName: role.displayName,
    description: role.description,
    permissions: role.permissions,
    scopes: role.scopes,
    limitations: Object.fromEntries(LIMITATION_NAMES.map((n) => [n, limits[n] ?? null])),
    inherits: role.inherits,
    assignable: role.assignable,
    builtIn: role.builtIn,
    createdAt: role.createdAt ? role.createdAt.toISOString() : null,
    updatedAt: role.updatedAt ? role.updatedAt.toISOString() : null,
  };
}

const MANAGE_TEAM = { permission: 'manage_team', scope: 'accounts' } as const;

/** Built-in and custom roles: the permission schema, and creating, changing and deleting custom roles. */
export class RoleService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
    private readonly audit: AuditLog,
    private readonly keys: KeyResolver,
    private readonly revocations: AccessRevocations,
  ) {}

  async schema(actor: Actor) {
    const custom = await this.access.customRoles(actor.principal.accountId);
    const roles: Record<string, ReturnType<typeof viewRole>> = {};
    for (const role of [...Object.values(BUILT_IN_ROLES), ...custom]) roles[role.id] = viewRole(role);
    return { roles, permissions: PERMISSION_DESCRIPTIONS, scopes: SCOPE_DESCRIPTIONS };
  }

  async list(actor: Actor) {
    const custom = await this.access.customRoles(actor.principal.accountId);
    return [...Object.values(BUILT_IN_ROLES), ...custom].map(viewRole);
  }

  async get(actor: Actor, roleId: string): Promise<RoleDefinition> {
    if (isBuiltInRole(roleId)) return BUILT_IN_ROLES[roleId];
    const row = await this.db.prisma.customRole.findUnique({
      where: { accountId_id: { accountId: actor.principal.accountId, id: roleId } },
    });
    if (!row) throw new ApiError('ROLE_NOT_FOUND', `no role ${roleId} in this account`, { roleId });
    return toRoleDefinition(row);
  }

  async create(actor: Actor, input: RoleInput) {
    const member = await this.access.require(actor, { ...MANAGE_TEAM, action: 'role_create_attempt' });
    if (!ROLE_NAME_PATTERN.test(input.name)) {
      throw validationError(
        'name',
        'must be 2-48 characters: lower-case letters, digits, _ and -, first a letter',
      );
    }
    const id = customRoleId(input.name);
    const existing = isBuiltInRole(input.name)
      ? input.name
      : (
          await this.db.prisma.customRole.findUnique({
            where: { accountId_id: { accountId: member.accountId, id } },
            select: { id: true },
          })
        )?.id;
    if (existing) {
      throw new ApiError('ROLE_NAME_EXISTS', `a role named ${input.name} already exists`, {
        roleName: input.name,
        existingRoleId: existing,
      });
    }
    const permissions = checkPermissions(input.permissions);
    const scopes = checkScopes(input.scopes);
    const inherits = [...new Set(input.inherits ?? [])];
    const custom = await this.access.customRoles(member.accountId);
    await this.checkHierarchy(member, id, inherits, custom);
    await this.access.assertCanConfer(member, permissions, scopes);
    const now = this.clock.now();
    const row = await this.db.prisma.customRole.create({
      data: {
        accountId: member.accountId,
        id,
        name: input.name,
        displayName: input.displayName,
        description: input.description ?? null,
        permissions,
        scopes,
        limitations: cleanLimitations(input.limitations) as Prisma.InputJsonValue,
        inherits,
        assignable: input.assignable ?? true,
        createdById: member.userId,
        createdAt: now,
        updatedAt: now,
      },
    });
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'role_created',
      actor: { userId: member.userId, ip: actor.ip },
      details: { roleId: id, permissions, scopes, inherits, limitations: row.limitations },
    });
    return viewRole(toRoleDefinition(row));
  }

  async update(actor: Actor, roleId: string, patch: RolePatch) {
    const member = await this.access.require(actor, { ...MANAGE_TEAM, action: 'role_update_attempt' });
    if (isBuiltInRole(roleId)) {
      throw new ApiError('CONFLICT', `built-in role ${roleId} cannot be changed; create a custom role`, {
        roleId,
      });
    }
    const before = await this.get(actor, roleId);
    const permissions = patch.permissions ? checkPermissions(patch.permissions) : before.permissions;
    const scopes = patch.scopes ? checkScopes(patch.scopes) : before.scopes;
    const inherits = patch.inherits ? [...new Set(patch.inherits)] : before.inherits;
    const custom = await this.access.customRoles(member.accountId);
    if (patch.inherits) await this.checkHierarchy(member, roleId, inherits, custom);
    if (patch.permissions || patch.scopes) await this.access.assertCanConfer(member, permissions, scopes);
    const row = await this.db.prisma.customRole.update({
      where: { accountId_id: { accountId: member.accountId, id: roleId } },
      data: {
        ...(patch.displayName !== undefined ? { displayName: patch.displayName } : {}),
        ...(patch.description !== undefined ? { description: patch.description } : {}),
        ...(patch.permissions ? { permissions } : {}),
        ...(patch.scopes ? { scopes } : {}),
        ...(patch.inherits ? { inherits } : {}),
        ...(patch.assignable !== undefined ? { assignable: patch.assignable } : {}),
        ...(patch.limitations !== undefined
          ? { limitations: cleanLimitations(patch.limitations) as Prisma.InputJsonValue }
          : {}),
        updatedAt: this.clock.now(),
      },
    });
    const after = toRoleDefinition(row);
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'role_modified',
      actor: { userId: member.userId, ip: actor.ip },
      details: { roleId, before: viewRole(before), after: viewRole(after) },
    });
    // Members holding the role (or one inheriting it) have new permissions from their next request on.
    await this.keys.invalidate();
    // Every open session of the account is re-checked: a role that lost cluster access ends them.
    await this.revocations.publish({ accountId: member.accountId, reason: 'member_changed' });
    return viewRole(after);
  }

  async remove(actor: Actor, roleId: string) {
    const member = await this.access.require(actor, { ...MANAGE_TEAM, action: 'role_delete_attempt' });
    if (isBuiltInRole(roleId)) {
      throw new ApiError('CONFLICT', `built-in role ${roleId} cannot be deleted`, { roleId });
    }
    const role = await this.get(actor, roleId);
    const [members, invitations, custom] = await Promise.all([
      this.db.prisma.user.count({
        where: { accountId: member.accountId, role: roleId, status: { not: 'removed' } },
      }),
      this.db.prisma.invitation.count({
        where: { accountId: member.accountId, role: roleId, status: { in: ['sent', 'resent'] } },
      }),
      this.access.customRoles(member.accountId),
    ]);
    const inheritedBy = custom.filter((r) => r.inherits.includes(roleId)).map((r) => r.id);
    if (members > 0 || invitations > 0 || inheritedBy.length > 0) {
      throw new ApiError('ROLE_IN_USE', `role ${roleId} is still in use`, {
        roleId,
        members,
        pendingInvitations: invitations,
        inheritedBy,
      });
    }
    await this.db.prisma.customRole.delete({
      where: { accountId_id: { accountId: member.accountId, id: roleId } },
    });
    await this.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'role_deleted',
      actor: { userId: member.userId, ip: actor.ip },
      details: { roleId, role: viewRole(role) },
    });
    return { id: roleId, deleted: true };
  }

  /**
   * A role may inherit only existing roles other than the owner, whose effective permissions and scopes
   * the caller holds (a custom role cannot inherit from a role with higher permissions), and never itself
   * through any chain. 422 INVALID_ROLE_HIERARCHY otherwise.
   */
  private async checkHierarchy(
    member: MemberAccess,
    childId: string,
    inherits: string[],
    custom: RoleDefinition[],
  ): Promise<void> {
    const fail = (parentRole: string, reason: string) =>
      new ApiError('INVALID_ROLE_HIERARCHY', `role ${childId} cannot inherit ${parentRole}: ${reason}`, {
        parentRole,
        childRole: childId,
        reason,
      });
    const lookup = roleLookup(custom);
    for (const parent of inherits) {
      if (parent === 'owner') throw fail(parent, 'the owner role cannot be inherited');
      if (parent === childId) throw fail(parent, 'a role cannot inherit itself');
      const definition = lookup(parent);
      if (!definition) throw fail(parent, 'no such role in this account');
      const resolved = resolveRole(parent, lookup);
      if (resolved.inheritedFrom.includes(childId)) {
        throw fail(parent, `${parent} already inherits ${childId}: inheritance would form a cycle`);
      }
      const above: string[] = [];
      for (const scope of resolved.scopes) {
        for (const permission of resolved.permissions) {
          if (!holds(member, permission, scope)) above.push(`${scope}:${permission}`);
        }
      }
      if (above.length > 0) {
        throw fail(parent, `it has higher permissions than yours (${above.join(', ')})`);
      }
    }
  }
}

function cleanLimitations(input: Limitations | undefined): Limitations {
  const out: Limitations = {};
  for (const name of LIMITATION_NAMES) {
    const value = input?.[name];
    if (typeof value === 'number') out[name] = value;
  }
  return out;
}

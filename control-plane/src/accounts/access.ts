import { ApiError, type KeyScope } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Principal } from '../auth/principal.ts';
import type { CustomRole, PermissionGrant, Resource, User } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { AuditLog } from './audit.ts';
import {
  isBuiltInRole,
  type LimitationName,
  type Limitations,
  lowestRoleWith,
  RESOURCE_PERMISSIONS,
  type ResolvedRole,
  ROLE_PERMISSIONS,
  ROLE_SCOPES,
  type RoleDefinition,
  type RolePermission,
  type RoleScope,
  resolveRole,
  roleLookup,
  scopeOfResourceType,
} from './roles.ts';

/**
 * The single place where Anvil decides what a member may do.
 *
 * Two gates, both must pass:
 * 1. The API key (http/authorize.ts): a read key only GETs; the key's scopes name the areas it reaches.
 * 2. The member behind the key (this module): effective permissions =
 *      role permissions and scopes, with inheritance (admin → developer → viewer, custom roles' inherits)
 *    ∪ the member's custom permissions (within the role's scopes)
 *    ∪ active, unexpired grants (optionally limited to resource ids)
 *    ∪ on one resource: active resource shares.
 *    On a resource, role permissions depend on ownership (resourceAccess): all of them on one's own
 *    resources; on teammates' resources only read and execute, unless the member manages the team.
 *
 * A suspended or removed member has no permissions, and the key resolver refuses their keys outright.
 * Denials answer 403 INSUFFICIENT_PERMISSIONS and are written to the audit log as access_denied.
 */

export interface Actor {
  principal: Principal;
  /** Caller's address, recorded in the audit log. */
  ip: string | null;
}

export interface Requirement {
  permission: RolePermission;
  scope: RoleScope;
  resourceId?: string | undefined;
  /**
   * With resourceId: the resource as its own area knows it (owner from its row), used when the resource
   * directory has no entry for it (rows from before the directory, tuning trials), instead of 404.
   */
  fallback?: Resource | undefined;
  /** With resourceId: its directory entry, when the caller has just read it (not read again). */
  listed?: Resource | undefined;
  /** A key scope the API key must also carry; missing → 403 INSUFFICIENT_PERMISSIONS with requiredScope. */
  keyScope?: KeyScope | undefined;
  /** Audit action on denial (default `<permission>_attempt`). */
  action?: string | undefined;
}

export type AccessSource = 'role' | 'custom_permission' | 'grant' | 'share';

export interface Decision {
  allowed: boolean;
  source: AccessSource | null;
  role: string;
  reason: string;
  grantId?: string | undefined;
  shareId?: string | undefined;
  resource?:
    | { id: string; type: string; name: string; ownerId: string; ownership: 'own' | 'team' }
    | undefined;
}

export interface MemberAccess {
  accountId: string;
  userId: string;
  name: string | null;
  email: string;
  role: string;
  status: string;
  resolved: ResolvedRole;
  customPermissions: RolePermission[];
  /** Active, unexpired grants. */
  grants: PermissionGrant[];
  /** Latest change to the role, the member, or a grant. */
  updatedAt: Date;
}

export interface ResourceAccess {
  own: string[];
  team: string[];
  public: string[];
}

const RESOURCE_PERMISSION_SET = new Set<string>(RESOURCE_PERMISSIONS);

export function toRoleDefinition(row: CustomRole): RoleDefinition {
  return {
    id: row.id,
    name: row.name,
    displayName: row.displayName,
    description: row.description,
    permissions: row.permissions,
    scopes: row.scopes,
    inherits: row.inherits,
    assignable: row.assignable,
    builtIn: false,
    limitations: (row.limitations ?? {}) as Limitations,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/** What a member holds on a scope without naming a resource: role ∪ custom permissions ∪ unlimited grants. */
export function holds(member: MemberAccess, permission: string, scope: string): AccessSource | null {
  if (member.status !== 'active') return null;
  const inRoleScope = member.resolved.scopes.has(scope as RoleScope);
  if (inRoleScope && member.resolved.permissions.has(permission as RolePermission)) return 'role';
  if (inRoleScope && member.customPermissions.includes(permission as RolePermission)) {
    return 'custom_permission';
  }
  const grant = member.grants.find(
    (g) => g.resources.length === 0 && g.permissions.includes(permission) && g.scopes.includes(scope),
  );
  return grant ? 'grant' : null;
}

/** Manages the team: may act on teammates' resources as on its own. */
function managesTeam(member: MemberAccess): boolean {
  return holds(member, 'manage_team', 'accounts') !== null;
}

/** Permissions (resource permissions only) the member has per role scope on own, team and public resources. */
export function resourceAccessOf(member: MemberAccess): Record<string, ResourceAccess> {
  const out: Record<string, ResourceAccess> = {};
  const admin = managesTeam(member);
  for (const scope of ROLE_SCOPES) {
    const own = RESOURCE_PERMISSIONS.filter((p) => holds(member, p, scope) !== null);
    if (own.length === 0) continue;
    out[scope] = {
      own: [...own],
      team: admin ? [...own] : own.filter((p) => p === 'read' || p === 'execute'),
      public: own.filter((p) => p === 'read'),
    };
  }
  return out;
}

export function memberAccessOf(user: User, resolved: ResolvedRole, grants: PermissionGrant[]): MemberAccess {
  let updatedAt = user.updatedAt;
  if (resolved.updatedAt && resolved.updatedAt > updatedAt) updatedAt = resolved.updatedAt;
  for (const grant of grants) if (grant.grantedAt > updatedAt) updatedAt = grant.grantedAt;
  return {
    accountId: user.accountId,
    userId: user.id,
    name: user.name,
    email: user.email,
    role: user.role,
    status: user.status,
    resolved,
    customPermissions: user.customPermissions.filter((p): p is RolePermission =>
      (ROLE_PERMISSIONS as readonly string[]).includes(p),
    ),
    grants,
    updatedAt,
  };
}

/** Permission names a member holds anywhere (role, custom permissions, grants), in catalogue order. */
export function permissionNames(member: MemberAccess): string[] {
  if (member.status !== 'active') return [];
  const names = new Set<string>([...member.resolved.permissions, ...member.customPermissions]);
  for (const grant of member.grants) for (const p of grant.permissions) names.add(p);
  return ROLE_PERMISSIONS.filter((p) => names.has(p));
}

export class AccessControl {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly audit: AuditLog,
  ) {}

  /** The account's custom roles as role definitions. */
  async customRoles(accountId: string): Promise<RoleDefinition[]> {
    const rows = await this.db.prisma.customRole.findMany({ where: { accountId }, orderBy: { id: 'asc' } });
    return rows.map(toRoleDefinition);
  }

  async resolveRoleOf(accountId: string, roleId: string): Promise<ResolvedRole> {
    const custom = isBuiltInRole(roleId) ? [] : await this.customRoles(accountId);
    return resolveRole(roleId, roleLookup(custom));
  }

  /** The member's access, or null when the user is not a member of the account (other account, removed). */
  async load(accountId: string, userId: string): Promise<MemberAccess | null> {
    const user = await this.db.prisma.user.findFirst({ where: { id: userId, accountId } });
    if (!user || user.status === 'removed') return null;
    const [resolved, grants] = await Promise.all([
      this.resolveRoleOf(accountId, user.role),
      this.db.prisma.permissionGrant.findMany({
        where: { accountId, userId, ...this.activeGrantFilter() },
        orderBy: { grantedAt: 'asc' },
      }),
    ]);
    return memberAccessOf(user, resolved, grants);
  }

  /** Access of many members at once (team listings): three queries whatever their number. */
  async loadMany(accountId: string, users: User[]): Promise<Map<string, MemberAccess>> {
    const [custom, grants] = await Promise.all([
      this.customRoles(accountId),
      this.db.prisma.permissionGrant.findMany({
        where: { accountId, userId: { in: users.map((u) => u.id) }, ...this.activeGrantFilter() },
        orderBy: { grantedAt: 'asc' },
      }),
    ]);
    const lookup = roleLookup(custom);
    return new Map(
      users.map((user) => [
        user.id,
        memberAccessOf(
          user,
          resolveRole(user.role, lookup),
          grants.filter((g) => g.userId === user.id),
        ),
      ]),
    );
  }

  private activeGrantFilter() {
    const now = this.clock.now();
    return { status: 'active', OR: [{ expiresAt: null }, { expiresAt: { gt: now } }] };
  }

  /** The calling member; a key whose member vanished between resolution and now is refused. */
  async caller(actor: Actor): Promise<MemberAccess> {
    const member = await this.load(actor.principal.accountId, actor.principal.userId);
    if (!member) throw new ApiError('UNAUTHORIZED', 'the API key owner is no longer a member', {});
    return member;
  }

  async findResource(accountId: string, resourceId: string): Promise<Resource | null> {
    return this.db.prisma.resource.findFirst({ where: { id: resourceId, accountId, deletedAt: null } });
  }

  /** Decides one permission for a member, on a scope or on one resource. Never throws. */
  async decide(
    member: MemberAccess,
    permission: string,
    scope: string,
    resource: Resource | null = null,
  ): Promise<Decision> {
    const base = { role: member.role };
    if (member.status !== 'active') {
      return { ...base, allowed: false, source: null, reason: `member is ${member.status}` };
    }
    if (!resource) {
      const source = holds(member, permission, scope);
      if (source) {
        const grant =
          source === 'grant'
            ? member.grants.find(
                (g) =>
                  g.resources.length === 0 && g.permissions.includes(permission) && g.scopes.includes(scope),
              )
            : undefined;
        return {
          ...base,
          allowed: true,
          source,
          reason: reasonFor(source, member.role),
          grantId: grant?.id,
        };
      }
      return {
        ...base,
        allowed: false,
        source: null,
        reason: `role ${member.role} does not hold ${permission} on ${scope}`,
      };
    }

    const resourceScope = scopeOfResourceType(resource.type);
    const ownership = resource.ownerId === member.userId ? 'own' : 'team';
    const resourceInfo = {
      id: resource.id,
      type: resource.type,
      name: resource.name,
      ownerId: resource.ownerId,
      ownership,
    } as const;
    if (scope !== resourceScope) {
      return {
        ...base,
        allowed: false,
        source: null,
        reason: `${resource.id} is a ${resource.type} in scope ${resourceScope}, not ${scope}`,
        resource: resourceInfo,
      };
    }
    const general = holds(member, permission, scope);
    if (general && general !== 'grant') {
      const onTeam =
        !RESOURCE_PERMISSION_SET.has(permission) ||
        ownership === 'own' ||
        permission === 'read' ||
        permission === 'execute' ||
        managesTeam(member);
      if (onTeam) {
        return {
          ...base,
          allowed: true,
          source: general,
          reason: `${reasonFor(general, member.role)} on ${ownership === 'own' ? 'own' : 'team'} resources`,
          resource: resourceInfo,
        };
      }
    }
    const grant = member.grants.find(
      (g) =>
        g.permissions.includes(permission) &&
        g.scopes.includes(scope) &&
        (g.resources.length === 0 || g.resources.includes(resource.id)),
    );
    if (grant) {
      return {
        ...base,
        allowed: true,
        source: 'grant',
        reason: `granted by ${grant.grantedById}${grant.reason ? `: ${grant.reason}` : ''}`,
        grantId: grant.id,
        resource: resourceInfo,
      };
    }
    const now = this.clock.now();
    const share = await this.db.prisma.resourceShare.findFirst({
      where: {
        accountId: member.accountId,
        resourceId: resource.id,
        userId: member.userId,
        status: 'active',
        permissions: { has: permission },
        OR: [{ expiresAt: null }, { expiresAt: { gt: now } }],
      },
    });
    if (share) {
      return {
        ...base,
        allowed: true,
        source: 'share',
        reason: `shared by ${share.sharedById}`,
        shareId: share.id,
        resource: resourceInfo,
      };
    }
    return {
      ...base,
      allowed: false,
      source: null,
      reason: general
        ? `role ${member.role} allows only read and execute on teammates' resources`
        : `role ${member.role} does not hold ${permission} on ${scope}`,
      resource: resourceInfo,
    };
  }

  /**
   * Passes when the calling member may do this; otherwise records an access_denied audit event and
   * throws 403 INSUFFICIENT_PERMISSIONS. Returns the caller's access for further checks.
   */
  async require(actor: Actor, requirement: Requirement): Promise<MemberAccess> {
    const member = await this.caller(actor);
    if (requirement.keyScope && !actor.principal.scopes.includes(requirement.keyScope)) {
      await this.deny(actor, member, requirement, 'the API key lacks the scope', null);
      throw new ApiError(
        'INSUFFICIENT_PERMISSIONS',
        `this operation requires an API key with the ${requirement.keyScope} scope`,
        { requiredScope: requirement.keyScope, keyScopes: actor.principal.scopes },
      );
    }
    let resource: Resource | null = null;
    if (requirement.resourceId) {
      const listed =
        requirement.listed?.id === requirement.resourceId && requirement.listed.accountId === member.accountId
          ? requirement.listed
          : await this.findResource(member.accountId, requirement.resourceId);
      resource = listed ?? requirement.fallback ?? null;
      if (!resource) {
        throw new ApiError('RESOURCE_NOT_FOUND', `no resource ${requirement.resourceId} in this account`, {
          resourceId: requirement.resourceId,
        });
      }
    }
    const decision = await this.decide(member, requirement.permission, requirement.scope, resource);
    if (decision.allowed) return member;
    await this.deny(actor, member, requirement, decision.reason, resource);
    throw insufficient(
      member,
      requirement.permission,
      requirement.scope,
      decision.reason,
      requirement.resourceId,
    );
  }

  /** Passes when any one of the requirements is met; the error names the first. */
  async requireAny(actor: Actor, requirements: Requirement[]): Promise<MemberAccess> {
    const member = await this.caller(actor);
    for (const requirement of requirements) {
      if (holds(member, requirement.permission, requirement.scope)) return member;
    }
    const first = requirements[0]!;
    const reason = `role ${member.role} holds none of ${requirements.map((r) => `${r.scope}:${r.permission}`).join(', ')}`;
    await this.deny(actor, member, first, reason, null);
    throw insufficient(member, first.permission, first.scope, reason, undefined);
  }

  private async deny(
    actor: Actor,
    member: MemberAccess,
    requirement: Requirement,
    reason: string,
    resource: Resource | null,
  ): Promise<void> {
    await this.audit.record({
      accountId: member.accountId,
      type: 'access_denied',
      action: requirement.action ?? `${requirement.permission}_attempt`,
      actor: { userId: member.userId, ip: actor.ip },
      resource: resource ? { type: resource.type, id: resource.id, name: resource.name } : undefined,
      details: {
        requiredPermission: requirement.permission,
        requiredScope: requirement.keyScope ?? requirement.scope,
        userRole: member.role,
        reason,
      },
    });
  }

  /**
   * Whether `member` may hand out these permissions: a grant, role, invitation or share never carries
   * more than the giver holds. Throws 403 INSUFFICIENT_PERMISSIONS naming what is missing.
   */
  async assertCanConfer(
    member: MemberAccess,
    permissions: string[],
    scopes: string[],
    resourceIds: string[] = [],
  ): Promise<void> {
    const missing: string[] = [];
    for (const scope of scopes) {
      for (const permission of permissions) {
        if (resourceIds.length === 0) {
          if (!holds(member, permission, scope)) missing.push(`${scope}:${permission}`);
          continue;
        }
        for (const id of resourceIds) {
          const resource = await this.findResource(member.accountId, id);
          const decision = resource
            ? await this.decide(member, permission, scopeOfResourceType(resource.type), resource)
            : null;
          if (!decision?.allowed) missing.push(`${id}:${permission}`);
        }
      }
    }
    if (missing.length === 0) return;
    const [scope, permission] = missing[0]!.split(':') as [string, string];
    const scopeForRole = (ROLE_SCOPES as readonly string[]).includes(scope) ? scope : null;
    throw new ApiError(
      'INSUFFICIENT_PERMISSIONS',
      `cannot give permissions above your own: you lack ${missing.join(', ')}`,
      {
        attemptedPermission: permission,
        attemptedPermissions: missing,
        userRole: member.role,
        currentRole: member.role,
        requiredRole: lowestRoleWith(permission, scopeForRole),
      },
    );
  }

  /** The member's limitations: from the role (strictest along its inheritance). */
  limitations(member: MemberAccess): Limitations {
    return member.resolved.limitations;
  }

  /**
   * Enforces a role limitation where a thing is created (API keys, clusters, endpoints): with `current`
   * things already held, one more must stay within the limit. 403 LIMIT_EXCEEDED otherwise.
   */
  assertWithinLimit(member: MemberAccess, name: LimitationName, current: number, adding = 1): void {
    const max = member.resolved.limitations[name];
    if (max === undefined || current + adding <= max) return;
    throw new ApiError('LIMIT_EXCEEDED', `role ${member.role} allows at most ${max} (${name})`, {
      limit: name,
      max,
      current,
      role: member.role,
    });
  }

  /** The spec's "effective permissions" view of a member. */
  effectiveView(member: MemberAccess) {
    const permissions = new Set<string>();
    const scopes = new Set<string>();
    for (const p of member.resolved.permissions) permissions.add(p);
    for (const s of member.resolved.scopes) scopes.add(s);
    for (const p of member.customPermissions) permissions.add(p);
    for (const grant of member.grants) {
      if (grant.resources.length > 0) continue;
      for (const p of grant.permissions) permissions.add(p);
      for (const s of grant.scopes) scopes.add(s);
    }
    const active = member.status === 'active';
    const limits = member.resolved.limitations;
    return {
      userId: member.userId,
      role: member.role,
      status: member.status,
      effectivePermissions: {
        permissions: active ? ROLE_PERMISSIONS.filter((p) => permissions.has(p)) : [],
        scopes: active ? ROLE_SCOPES.filter((s) => scopes.has(s)) : [],
        resourceAccess: active ? resourceAccessOf(member) : {},
        limitations: {
          maxEndpoints: limits.maxEndpoints ?? null,
          maxClusters: limits.maxClusters ?? null,
          maxComputeHours: limits.maxComputeHours ?? null,
          maxApiKeys: limits.maxApiKeys ?? null,
          maxTeamMembers: null,
        },
      },
      customPermissions: member.customPermissions,
      grants: member.grants.map((g) => ({
        id: g.id,
        permissions: g.permissions,
        scopes: g.scopes,
        resources: g.resources,
        expiresAt: g.expiresAt ? g.expiresAt.toISOString() : null,
        reason: g.reason,
      })),
      inheritedFrom: member.resolved.inheritedFrom,
      lastUpdated: member.updatedAt.toISOString(),
    };
  }
}

function reasonFor(source: AccessSource, role: string): string {
  switch (source) {
    case 'role':
      return `role ${role} allows it`;
    case 'custom_permission':
      return "the member's custom permissions allow it";
    case 'grant':
      return 'an active grant allows it';
    case 'share':
      return 'the resource is shared with the member';
  }
}

function insufficient(
  member: MemberAccess,
  permission: string,
  scope: string,
  reason: string,
  resourceId: string | undefined,
): ApiError {
  return new ApiError('INSUFFICIENT_PERMISSIONS', `${reason}: ${scope}:${permission} is required`, {
    requiredPermission: permission,
    requiredScope: scope,
    requiredRole: lowestRoleWith(permission, scope),
    currentRole: member.role,
    userRole: member.role,
    ...(resourceId ? { resourceId } : {}),
  });
}

/** Text for the OpenAPI description: how member access is decided. */
export const ACCESS_CONTROL_DESCRIPTION = `**Members, roles and permissions.** Every key belongs to a member of an
account, and a request passes two gates. The key: a read key only GETs, and the key's scopes name the areas it
reaches (403 FORBIDDEN with \`required_permission\`). The member: effective permissions are the role's (owner
\`*\`; admin inherits developer, which inherits viewer; custom roles \`role_custom_<name>\` with \`inherits\`)
plus the member's custom permissions within the role's scopes, plus active, unexpired grants (optionally
limited to resource ids), plus — on one resource — active shares. On clusters and endpoints ownership
matters: a role's permissions apply in full to one's own resources, and to teammates' resources only for
read and execute unless the member manages the team. Administrative operations need manage_team (team,
roles, grants, audit), manage_billing (billing settings, with a key carrying the \`billing\` scope),
manage_security and manage_integrations (those settings). A member lacking a permission gets 403
INSUFFICIENT_PERMISSIONS with details {requiredPermission, requiredScope, requiredRole, currentRole} (or
requiredScope for a key without \`billing\`), and the denial is written to the audit log. Nobody gives more
than they hold: grants, shares, custom roles and invitations above the giver answer 403
INSUFFICIENT_PERMISSIONS naming what is missing. Suspending or removing a member stops their keys at once,
in every control-plane process. Ids of another account answer 404.`;

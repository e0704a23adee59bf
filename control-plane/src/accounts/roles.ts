/**
 * The role catalogue (spec: Resources → Role) and how a role's effective permissions are worked out:
 * its own permissions and scopes, plus everything it inherits, transitively. Pure: no database.
 */

export const ROLE_PERMISSIONS = [
  'read',
  'write',
  'execute',
  'manage_team',
  'manage_billing',
  'manage_integrations',
  'manage_security',
] as const;
export type RolePermission = (typeof ROLE_PERMISSIONS)[number];

export const ROLE_SCOPES = [
  'endpoints',
  'clusters',
  'accounts',
  'billing',
  'integrations',
  'security',
] as const;
export type RoleScope = (typeof ROLE_SCOPES)[number];

/** Permissions that act on resources (clusters, endpoints, ...): what shares and resourceAccess carry. */
export const RESOURCE_PERMISSIONS = ['read', 'write', 'execute'] as const;
export type ResourcePermission = (typeof RESOURCE_PERMISSIONS)[number];

export const PERMISSION_DESCRIPTIONS: Record<RolePermission, string> = {
  read: 'View resources and their state',
  write: 'Create, change and delete resources',
  execute: 'Run workloads: start clusters, call endpoints, launch training',
  manage_team: 'Invite, change, suspend and remove members; roles, grants and the audit log',
  manage_billing: 'Change billing settings and payment details',
  manage_integrations: 'Configure GitHub, Docker registries, monitoring and other integrations',
  manage_security: 'Change security settings (2FA, IP allow-list, sessions) and export secrets',
};

export const SCOPE_DESCRIPTIONS: Record<RoleScope, string> = {
  endpoints: 'Serverless endpoints and their executions',
  clusters: 'GPU clusters (and the training jobs that run on them)',
  accounts: 'Account administration: team, roles, notifications, preferences',
  billing: 'Billing settings, costs and usage reports',
  integrations: 'Integrations and outbound webhooks',
  security: 'Security settings',
};

export const BUILT_IN_ROLE_NAMES = ['owner', 'admin', 'developer', 'viewer'] as const;
export type BuiltInRoleName = (typeof BUILT_IN_ROLE_NAMES)[number];

export interface Limitations {
  maxEndpoints?: number | undefined;
  maxClusters?: number | undefined;
  maxComputeHours?: number | undefined;
  maxApiKeys?: number | undefined;
}
export const LIMITATION_NAMES = ['maxEndpoints', 'maxClusters', 'maxComputeHours', 'maxApiKeys'] as const;
export type LimitationName = (typeof LIMITATION_NAMES)[number];

export interface RoleDefinition {
  id: string;
  name: string;
  displayName: string;
  description: string | null;
  /** `*` for the owner. */
  permissions: string[];
  scopes: string[];
  inherits: string[];
  assignable: boolean;
  builtIn: boolean;
  limitations: Limitations;
  createdAt: Date | null;
  updatedAt: Date | null;
}

const builtIn = (
  name: BuiltInRoleName,
  displayName: string,
  description: string,
  permissions: string[],
  scopes: string[],
  inherits: string[],
  assignable: boolean,
): RoleDefinition => ({
  id: name,
  name,
  displayName,
  description,
  permissions,
  scopes,
  inherits,
  assignable,
  builtIn: true,
  limitations: {},
  createdAt: null,
  updatedAt: null,
});

export const BUILT_IN_ROLES: Record<BuiltInRoleName, RoleDefinition> = {
  owner: builtIn('owner', 'Owner', 'Full access to the account; cannot be assigned', ['*'], ['*'], [], false),
  admin: builtIn(
    'admin',
    'Admin',
    'Manages the team and billing, and everything a developer does',
    ['read', 'write', 'execute', 'manage_team', 'manage_billing'],
    ['endpoints', 'clusters', 'accounts', 'billing'],
    ['developer'],
    true,
  ),
  developer: builtIn(
    'developer',
    'Developer',
    'Creates and runs clusters and endpoints',
    ['read', 'write', 'execute'],
    ['endpoints', 'clusters'],
    ['viewer'],
    true,
  ),
  viewer: builtIn(
    'viewer',
    'Viewer',
    'Read-only access to clusters and endpoints',
    ['read'],
    ['endpoints', 'clusters'],
    [],
    true,
  ),
};

export function isBuiltInRole(name: string): name is BuiltInRoleName {
  return (BUILT_IN_ROLE_NAMES as readonly string[]).includes(name);
}

export const CUSTOM_ROLE_PREFIX = 'role_custom_';
export const customRoleId = (name: string) => `${CUSTOM_ROLE_PREFIX}${name}`;

export interface ResolvedRole {
  role: string;
  permissions: Set<RolePermission>;
  scopes: Set<RoleScope>;
  /** Roles whose permissions this one inherits, nearest first. */
  inheritedFrom: string[];
  limitations: Limitations;
  /** Latest change to the role or anything it inherits. */
  updatedAt: Date | null;
}

/** Looks a role up by id among the built-ins and the account's custom roles. */
export type RoleLookup = (id: string) => RoleDefinition | undefined;

export function roleLookup(customRoles: RoleDefinition[]): RoleLookup {
  const byId = new Map(customRoles.map((role) => [role.id, role]));
  return (id) => (isBuiltInRole(id) ? BUILT_IN_ROLES[id] : byId.get(id));
}

/**
 * A role's effective permissions: its own plus those of every role it inherits (depth first, each role
 * once, so a cycle cannot loop). Limitations combine to the strictest value along the chain. An unknown
 * role (a custom role deleted under a member) resolves to nothing.
 */
export function resolveRole(roleId: string, lookup: RoleLookup): ResolvedRole {
  const permissions = new Set<RolePermission>();
  const scopes = new Set<RoleScope>();
  const inheritedFrom: string[] = [];
  const limitations: Limitations = {};
  let updatedAt: Date | null = null;
  const seen = new Set<string>();
  const visit = (id: string, depth: number) => {
    if (seen.has(id)) return;
    seen.add(id);
    const role = lookup(id);
    if (!role) return;
    if (depth > 0) inheritedFrom.push(id);
    for (const p of role.permissions) {
      if (p === '*') for (const all of ROLE_PERMISSIONS) permissions.add(all);
      else if ((ROLE_PERMISSIONS as readonly string[]).includes(p)) permissions.add(p as RolePermission);
    }
    for (const s of role.scopes) {
      if (s === '*') for (const all of ROLE_SCOPES) scopes.add(all);
      else if ((ROLE_SCOPES as readonly string[]).includes(s)) scopes.add(s as RoleScope);
    }
    for (const name of LIMITATION_NAMES) {
      const value = role.limitations[name];
      if (typeof value === 'number') {
        const current = limitations[name];
        limitations[name] = current === undefined ? value : Math.min(current, value);
      }
    }
    if (role.updatedAt && (!updatedAt || role.updatedAt > updatedAt)) updatedAt = role.updatedAt;
    for (const parent of role.inherits) visit(parent, depth + 1);
  };
  visit(roleId, 0);
  return { role: roleId, permissions, scopes, inheritedFrom, limitations, updatedAt };
}

/** The first role of viewer → developer → admin → owner that holds the permission in the scope. */
export function lowestRoleWith(permission: string, scope: string | null): BuiltInRoleName {
  for (const name of ['viewer', 'developer', 'admin'] as const) {
    const role = resolveRole(name, roleLookup([]));
    if (
      role.permissions.has(permission as RolePermission) &&
      (scope === null || role.scopes.has(scope as RoleScope))
    ) {
      return name;
    }
  }
  return 'owner';
}

/** Resource id prefixes (spec: Identifier shapes) → the resource type and the role scope it lives in. */
const RESOURCE_TYPES: { prefix: string; type: string; scope: RoleScope }[] = [
  { prefix: 'cluster_', type: 'cluster', scope: 'clusters' },
  { prefix: 'ep_', type: 'endpoint', scope: 'endpoints' },
  { prefix: 'ds_', type: 'dataset', scope: 'clusters' },
  { prefix: 'job_', type: 'training_job', scope: 'clusters' },
  { prefix: 'tune_', type: 'tuning_job', scope: 'clusters' },
  { prefix: 'exp_', type: 'experiment', scope: 'clusters' },
  { prefix: 'tmpl_', type: 'template', scope: 'clusters' },
];

export const RESOURCE_TYPE_SCOPES: Record<string, RoleScope> = Object.fromEntries(
  RESOURCE_TYPES.map((entry) => [entry.type, entry.scope]),
);

export function resourceTypeOf(resourceId: string): string | null {
  return RESOURCE_TYPES.find((entry) => resourceId.startsWith(entry.prefix))?.type ?? null;
}

export function scopeOfResourceType(type: string): RoleScope {
  return RESOURCE_TYPE_SCOPES[type] ?? 'clusters';
}

import type { KeyPermission, KeyScope } from '@anvil/shared';
import type { AccessControl, MemberAccess } from './access.ts';
import type { ResolvedRole } from './roles.ts';
import { isBuiltInRole } from './roles.ts';
import { validationError } from './validation.ts';

/**
 * Checks that `roleId` may be given to a member by `giver`: it exists in the account, is assignable
 * (never the owner), and carries nothing the giver lacks (403 INSUFFICIENT_PERMISSIONS).
 */
export async function checkAssignableRole(
  access: AccessControl,
  giver: MemberAccess,
  roleId: string,
  field = 'role',
): Promise<ResolvedRole> {
  if (roleId === 'owner') throw validationError(field, 'the owner role cannot be assigned');
  const custom = isBuiltInRole(roleId) ? [] : await access.customRoles(giver.accountId);
  const definition = isBuiltInRole(roleId) ? { assignable: true } : custom.find((r) => r.id === roleId);
  if (!definition) {
    throw validationError(field, `no role ${roleId}: use admin, developer, viewer or a custom role id`);
  }
  if (!definition.assignable) throw validationError(field, `role ${roleId} is not assignable`);
  const resolved = await access.resolveRoleOf(giver.accountId, roleId);
  await access.assertCanConfer(giver, [...resolved.permissions], [...resolved.scopes]);
  return resolved;
}

/**
 * The API key a new member receives: read & write when the role can change anything, else read only;
 * scopes follow the role (clusters also reach training and AI, integrations reach webhooks), plus
 * accounts so every member manages their own profile and keys.
 */
export function keyGrantForRole(resolved: ResolvedRole): {
  permissions: KeyPermission[];
  scopes: KeyScope[];
} {
  const writes = [...resolved.permissions].some((p) => p !== 'read');
  const scopes = new Set<KeyScope>(['accounts']);
  for (const scope of resolved.scopes) {
    if (scope === 'endpoints') scopes.add('endpoints').add('ai');
    if (scope === 'clusters') scopes.add('clusters').add('training').add('ai');
    if (scope === 'billing') scopes.add('billing');
    if (scope === 'integrations') scopes.add('webhooks');
  }
  const order: KeyScope[] = ['accounts', 'clusters', 'endpoints', 'training', 'billing', 'ai', 'webhooks'];
  return {
    permissions: writes ? ['read', 'write'] : ['read'],
    scopes: order.filter((s) => scopes.has(s)),
  };
}

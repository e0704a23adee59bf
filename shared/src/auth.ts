/** Key permissions (spec: API key). A read key may only GET; read & write may GET, POST, PUT, PATCH, DELETE. */
export const KEY_PERMISSIONS = ['read', 'write'] as const;
export type KeyPermission = (typeof KEY_PERMISSIONS)[number];

/** Resource areas a key may be restricted to (spec: Authentication, point 4). */
export const KEY_SCOPES = [
  'accounts',
  'clusters',
  'endpoints',
  'training',
  'billing',
  'ai',
  'webhooks',
] as const;
export type KeyScope = (typeof KEY_SCOPES)[number];

/**
 * read: GET only. read_write: every method. service: machine-to-machine keys that reach only routes
 * marked as service routes (serverless execution, training jobs, AI services), within their scopes.
 */
export const KEY_TYPES = ['read', 'read_write', 'service'] as const;
export type KeyType = (typeof KEY_TYPES)[number];

export const ACCOUNT_TIERS = ['free', 'pro', 'enterprise'] as const;
export type AccountTier = (typeof ACCOUNT_TIERS)[number];

export function permissionForMethod(method: string): KeyPermission {
  return method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? 'read' : 'write';
}

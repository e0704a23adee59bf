import { ApiError, type KeyPermission, type KeyScope, permissionForMethod } from '@anvil/shared';
import type { FastifyInstance } from 'fastify';
import type { Principal } from '../auth/principal.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Reachable without an API key (health checks, docs). */
    public?: boolean;
    /**
     * Resource area the route belongs to; the key needs it in its scopes. `null` means any valid key
     * (verify, rate-limit status). Every authenticated route must declare it: forgetting is a start-up error.
     */
    scope?: KeyScope | null;
    /** Service keys reach only routes marked as service routes. */
    service?: boolean;
    /**
     * The key permission the route needs when its method would say otherwise: a POST that only reads
     * (a batch of health queries too long for a URL) declares 'read'.
     */
    permission?: KeyPermission;
  }
  interface FastifyRequest {
    principal: Principal | null;
  }
}

/** Decides whether the key may call this route: method → permission, route → scope, key type → service. */
export function authorize(
  principal: Principal,
  method: string,
  scope: KeyScope | null,
  service: boolean,
  declared?: KeyPermission,
): void {
  const permission = declared ?? permissionForMethod(method);
  const required = `${scope ?? 'any'}:${permission}`;
  if (!principal.permissions.includes(permission)) {
    throw new ApiError(
      'FORBIDDEN',
      `this API key lacks the ${permission} permission needed for ${declared ? 'this route' : `${method} requests`}`,
      { permission, keyPermissions: principal.permissions },
      { extra: { required_permission: required } },
    );
  }
  if (scope !== null && !principal.scopes.includes(scope)) {
    throw new ApiError(
      'FORBIDDEN',
      `this API key is not scoped to ${scope}`,
      { scope, keyScopes: principal.scopes },
      { extra: { required_permission: required } },
    );
  }
  if (principal.keyType === 'service' && !service && scope !== null) {
    throw new ApiError(
      'FORBIDDEN',
      'service keys reach only service routes (serverless execution, training jobs, AI services)',
      { keyType: 'service' },
      { extra: { required_permission: required } },
    );
  }
}

/** Every authenticated route must say which scope it needs: forgetting is a start-up error. */
export function requireRouteScopes(app: FastifyInstance): void {
  app.decorateRequest('principal', null);
  app.addHook('onRoute', (route) => {
    const config = (route.config ?? {}) as { public?: boolean; scope?: KeyScope | null };
    if (!config.public && config.scope === undefined && !route.url.startsWith('/docs')) {
      throw new Error(`route ${route.method} ${route.url} declares neither public nor scope`);
    }
  });
}

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AccountIpPolicy } from '../accounts/settings-ip-policy.ts';
import type { KeyResolver } from '../auth/key-resolver.ts';
import type { Principal } from '../auth/principal.ts';
import type { RateLimitService } from '../ratelimit/service.ts';
import { authorize, requireRouteScopes } from './authorize.ts';
import { admitRequest } from './rate-limit.ts';

type Done = (error?: Error) => void;
/** The route's config as fastify keeps it (our fields plus its url and method); read once per request. */
type RouteConfig = FastifyRequest['routeOptions']['config'];

/**
 * The gate in front of every route, as one onRequest hook: request id header, then the API key (401),
 * then the account's address allowlist (403 IP_NOT_ALLOWED; request.ip, which reads X-Forwarded-For only
 * from ANVIL_TRUSTED_PROXIES), then the rate limit (429; its headers go on everything after, 403s included), then permissions and
 * scope (403). One callback hook rather than four async ones because this runs on every request: with a
 * cached key and a counter that needs no sync, the whole gate is synchronous and allocates no promise
 * and no closure (tsx names every closure assigned to a variable with a defineProperty call, per call).
 */
export function installRequestGuard(
  app: FastifyInstance,
  keys: KeyResolver,
  limits: RateLimitService,
  ips: AccountIpPolicy,
): void {
  requireRouteScopes(app);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    const config = request.routeOptions.config;
    if (config.public || config.scope === undefined) {
      done();
      return;
    }
    let cached: Principal | undefined;
    try {
      cached = keys.resolveCached(request.headers.authorization);
    } catch (error) {
      done(error as Error);
      return;
    }
    if (cached) {
      admitAddress(request, reply, config, cached, limits, ips, done);
      return;
    }
    keys
      .resolve(request.headers.authorization)
      .then((principal) => admitAddress(request, reply, config, principal, limits, ips, done), done);
  });
}

/** The account's ip_whitelist, before the request is counted: synchronous when the list is cached. */
function admitAddress(
  request: FastifyRequest,
  reply: FastifyReply,
  config: RouteConfig,
  principal: Principal,
  limits: RateLimitService,
  ips: AccountIpPolicy,
  done: Done,
): void {
  const refusal = ips.admit(principal.accountId, request.ip);
  if (refusal === null) {
    admitAndAuthorize(request, reply, config, principal, limits, done);
  } else if (refusal instanceof Promise) {
    refusal.then(
      (error) => (error ? done(error) : admitAndAuthorize(request, reply, config, principal, limits, done)),
      done,
    );
  } else {
    done(refusal);
  }
}

function admitAndAuthorize(
  request: FastifyRequest,
  reply: FastifyReply,
  config: RouteConfig,
  principal: Principal,
  limits: RateLimitService,
  done: Done,
): void {
  request.principal = principal;
  const admitted = admitRequest(request, reply, principal, limits, config.url ?? request.url);
  if (admitted instanceof Promise) {
    admitted.then((refusal) => authorizeAfter(request.method, config, principal, refusal, done), done);
  } else {
    authorizeAfter(request.method, config, principal, admitted, done);
  }
}

/** Permissions and scope, checked once the request was counted (or refused by the rate limit). */
function authorizeAfter(
  method: string,
  config: RouteConfig,
  principal: Principal,
  refusal: Error | null,
  done: Done,
): void {
  if (refusal) {
    done(refusal);
    return;
  }
  try {
    authorize(principal, method, config.scope ?? null, config.service === true, config.permission);
  } catch (error) {
    done(error as Error);
    return;
  }
  done();
}

import type { FastifyInstance, FastifyRequest } from 'fastify';
import { OTP_HEADER, type TwoFactorGate } from '../auth/two-factor/gate.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * A sensitive operation (key creation, secret reveal, member removal, ...): where two-factor applies
     * to the caller it needs a code in X-Anvil-OTP. The string names the operation in the refusal; a
     * function decides from the validated request (a secret read is sensitive only with include_value).
     */
    sensitive?: string | ((request: FastifyRequest) => string | null);
  }
}

/**
 * Checks the two-factor code of sensitive routes. A preHandler, so it runs after the key, the rate limit
 * and the permissions (onRequest) and after validation, when a route's predicate can read its body.
 */
export function installSensitiveGuard(app: FastifyInstance, gate: TwoFactorGate): void {
  app.addHook('preHandler', async (request) => {
    const rule = request.routeOptions.config.sensitive;
    if (rule === undefined || !request.principal) return;
    const operation = typeof rule === 'string' ? rule : rule(request);
    if (operation === null) return;
    await gate.check(request.principal, request.headers[OTP_HEADER], operation);
  });
}

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import {
  BoostRecord,
  LimitView,
  RateLimitsResponse,
  TemporaryBoostBody,
  TemporaryBoostResponse,
  viewBoost,
  viewStatus,
} from './rate-limits.schemas.ts';

export const rateLimitRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.addSchema(LimitView);
  app.addSchema(BoostRecord);
  const tags = ['auth'];

  app.get(
    '/v2/auth/rate-limits',
    {
      config: { scope: null },
      schema: {
        tags,
        summary: "The account's rate limits and what is left of them in the current windows",
        description:
          'Counts are the shared counters of every control-plane process; this request is counted as a read.',
        response: { 200: RateLimitsResponse, ...flatErrors(401, 429) },
      },
    },
    async (request) => viewStatus(await context.rateLimits.status(request.principal!)),
  );

  app.post(
    '/v2/auth/temporary-boost',
    {
      config: { scope: 'accounts' },
      schema: {
        tags,
        summary:
          "Multiply the account's rate limits for a while (1 < multiplier <= the tier's ceiling, up to 72h)",
        description:
          'Applies to every tier and endpoint limit of the account from now until it expires, and is recorded ' +
          'with its reason and the key that asked, and in the audit log (permission_change, ' +
          'temporary_boost_created). Needs an accounts:write key of a member holding manage_billing (owner, ' +
          'admin); others get 403 INSUFFICIENT_PERMISSIONS. The multiplier is at most 3 on Free, 5 on Pro and ' +
          '10 on Enterprise (400 VALIDATION_ERROR above). One boost at a time: while one is active the answer ' +
          'is 409 BOOST_ALREADY_ACTIVE (the active boost is not replaced or extended), and after one ends the ' +
          'next may start 7 days later (409 BOOST_COOLDOWN, details.nextAllowedAt).',
        body: TemporaryBoostBody,
        response: { 201: TemporaryBoostResponse, ...flatErrors(400, 401, 403, 409, 413, 429) },
      },
    },
    async (request, reply) => {
      const { boost, status } = await context.rateLimits.boost(actorOf(request), request.body);
      return reply.code(201).send({
        ...viewStatus(status),
        boost: viewBoost(boost),
        message: `Limits multiplied by ${boost.multiplier} until ${boost.expiresAt.toISOString()}.`,
      });
    },
  );
};

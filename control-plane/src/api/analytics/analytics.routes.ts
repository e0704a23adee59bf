import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { ApiUsageQuery, ApiUsageResponse } from './analytics.schemas.ts';

export const analyticsRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.get(
    '/v2/analytics/api-usage',
    {
      config: { scope: 'accounts' },
      schema: {
        tags: ['analytics'],
        summary: "The account's API requests in a period, by route, status and key",
        description:
          'Every authenticated request counts, whatever its status (403, 404 and 429 included); requests ' +
          'refused for a missing or invalid key belong to no account and are not counted. Requests are ' +
          'counted per minute (the period covers the minutes starting inside it) and reach the figures ' +
          'within about a second. p95DurationMs is estimated from a histogram of durations (buckets from ' +
          '0.1 ms to 60 s, interpolated within the bucket) and is never above the slowest request.',
        querystring: ApiUsageQuery,
        response: { 200: ApiUsageResponse, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => context.apiUsage.report(request.principal!.accountId, request.query.period),
  );
};

import { Type } from '@sinclair/typebox';
import { API_USAGE_PERIODS, DEFAULT_API_USAGE_PERIOD } from '../../usage/api-usage.ts';

const periods = Object.keys(API_USAGE_PERIODS).join(', ');

export const ApiUsageQuery = Type.Object(
  {
    period: Type.Optional(
      Type.String({
        description: `One of ${periods} (default ${DEFAULT_API_USAGE_PERIOD}); anything else answers 400 INVALID_PERIOD`,
      }),
    ),
  },
  { additionalProperties: false },
);

export const ApiUsageResponse = Type.Object({
  period: Type.String(),
  periodStart: Type.String({ format: 'date-time' }),
  periodEnd: Type.String({ format: 'date-time' }),
  totalRequests: Type.Integer(),
  errorCount: Type.Integer({ description: 'Responses with status 400 or above' }),
  errorRate: Type.Number({ description: 'errorCount / totalRequests, 0 without requests' }),
  byRoute: Type.Array(
    Type.Object({
      method: Type.String(),
      route: Type.String({ description: 'The route pattern, e.g. /v2/auth/api-keys/:key_id' }),
      count: Type.Integer(),
      errorCount: Type.Integer(),
      avgDurationMs: Type.Number(),
      p95DurationMs: Type.Number(),
    }),
  ),
  byStatus: Type.Record(Type.String({ pattern: '^[0-9]{3}$' }), Type.Integer(), {
    description: 'Requests per HTTP status, e.g. {"200": 41, "429": 2}',
  }),
  byKey: Type.Array(
    Type.Object({
      keyId: Type.Union([Type.String(), Type.Null()]),
      name: Type.Union([Type.String(), Type.Null()]),
      environment: Type.Union([Type.String(), Type.Null()], { description: 'live or test' }),
      count: Type.Integer(),
    }),
  ),
});

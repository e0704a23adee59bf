import { Type } from '@sinclair/typebox';
import {
  BOOST_MAX_MULTIPLIER,
  BOOST_MIN_MULTIPLIER,
  BOOST_REASON_MAX,
  type Boost,
} from '../../ratelimit/boosts.ts';
import type { RateLimitStatus } from '../../ratelimit/service.ts';

const NullableInteger = Type.Union([Type.Integer(), Type.Null()]);

const LimitFields = {
  limit: Type.Union([Type.Integer(), Type.Null()], {
    description: 'Requests per window, the boost included; null = unlimited',
  }),
  remaining: NullableInteger,
  reset_at: Type.String({ format: 'date-time', description: 'When the window ends and the count restarts' }),
  window_seconds: Type.Integer(),
  base_limit: Type.Union([Type.Integer(), Type.Null()], { description: 'The limit without a boost' }),
};

export const LimitView = Type.Object(LimitFields, { $id: 'RateLimit' });

export const BoostRecord = Type.Object(
  {
    id: Type.String({ description: 'boost_<id>' }),
    multiplier: Type.Number(),
    reason: Type.String(),
    startsAt: Type.String({ format: 'date-time' }),
    expiresAt: Type.String({ format: 'date-time' }),
    createdByKeyId: Type.String({ description: 'The key that asked for the boost' }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'RateLimitBoost' },
);

const Limits = Type.Object({
  read_operations: Type.Ref('RateLimit'),
  write_operations: Type.Ref('RateLimit'),
  ai_services: Type.Ref('RateLimit'),
  training_jobs: Type.Ref('RateLimit', { description: 'Training jobs created per UTC day' }),
});

const EndpointLimit = Type.Object({ operation: Type.String(), ...LimitFields });

export const RateLimitsResponse = Type.Object({
  tier: Type.String({ description: 'free, pro or enterprise' }),
  limits: Limits,
  endpoint_limits: Type.Array(EndpointLimit, { description: 'The per-hour limits of specific operations' }),
  boost: Type.Union([Type.Ref('RateLimitBoost'), Type.Null()], { description: 'The boost in force, if any' }),
  priority_reserve: Type.Object({
    fraction: Type.Number({ description: 'Share of each limit that X-Priority: high requests may add' }),
  }),
});

export const TemporaryBoostBody = Type.Object(
  {
    multiplier: Type.Number({
      exclusiveMinimum: BOOST_MIN_MULTIPLIER,
      maximum: BOOST_MAX_MULTIPLIER,
      description: `Factor applied to every limit: greater than ${BOOST_MIN_MULTIPLIER}, at most ${BOOST_MAX_MULTIPLIER}`,
    }),
    duration: Type.String({
      pattern: '^[0-9]{1,6}[mhd]$',
      maxLength: 7,
      description: 'How long the boost lasts: <n>m, <n>h or <n>d, from 1m to 72h (e.g. 30m, 24h, 3d)',
    }),
    reason: Type.String({
      minLength: 1,
      maxLength: BOOST_REASON_MAX,
      description: 'Why; kept with the boost',
    }),
  },
  { additionalProperties: false },
);

export const TemporaryBoostResponse = Type.Object({
  boost: Type.Ref('RateLimitBoost'),
  tier: Type.String(),
  limits: Limits,
  endpoint_limits: Type.Array(EndpointLimit),
  message: Type.String(),
});

export function viewBoost(boost: Boost) {
  return {
    id: boost.id,
    multiplier: boost.multiplier,
    reason: boost.reason,
    startsAt: boost.startsAt.toISOString(),
    expiresAt: boost.expiresAt.toISOString(),
    createdByKeyId: boost.createdByKeyId,
    createdAt: boost.createdAt.toISOString(),
  };
}

export function viewStatus(status: RateLimitStatus) {
  return {
    tier: status.tier,
    limits: status.limits,
    endpoint_limits: status.endpoint_limits,
    boost: status.boost ? viewBoost(status.boost) : null,
    priority_reserve: status.priority_reserve,
  };
}

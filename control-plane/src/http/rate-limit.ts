import { ApiError } from '@anvil/shared';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.ts';
import type { RateLimitOutcome, RateLimitService } from '../ratelimit/service.ts';

/** Text for the OpenAPI description: what the limits are and how they behave. */
export const RATE_LIMITS_DESCRIPTION = `**Rate limits.** Limits are per account (every key of the account
counts together) in fixed windows: UTC clock hours, UTC days for training jobs. Every authenticated request
counts against its tier limit — read (GET), write (POST, PUT, PATCH, DELETE) or AI services (anything under
/ai) — and, where the operation is in the spec's endpoint table (GET /accounts/* 500/h, POST /clusters 20/h,
POST /training/jobs 10/h, ...; matched with or without the /v1 or /v2 prefix), against that endpoint
limit too; POST /training/jobs also counts against training jobs per day. Both apply: the most
restrictive wins. Every authenticated response, errors included, carries \`X-RateLimit-Limit\`,
\`X-RateLimit-Remaining\`, \`X-RateLimit-Reset\` (Unix time, seconds) and \`X-RateLimit-Window\` (seconds)
of the applicable limit with the fewest requests left. A refused request answers 429 with \`Retry-After\`;
it is not counted and changes nothing. A tier limit answers \`RATE_LIMITED\` (with \`retry_after\`), an
endpoint limit \`RATE_LIMIT_EXCEEDED\`; both carry details {limit, remaining, reset_at, retry_after}.

**X-Priority: high.** Once a limit is spent, requests sent with \`X-Priority: high\` may still use a reserve
of 10% of the limit (at least one request) in that window; they also carry \`X-RateLimit-Reserve-Remaining\`.
Ordinary requests never touch the reserve, so it is there for the critical call that must get through.

**Temporary boost.** POST /v2/auth/temporary-boost multiplies every limit of the account (tier and endpoint;
unlimited stays unlimited) by 1 < multiplier <= the tier's ceiling (Free 3, Pro 5, Enterprise 10) for 1m to
72h, recorded with its reason and the key that asked, and audit-logged. It needs manage_billing (owner, admin).
One boost at a time: asking while one is active answers 409 BOOST_ALREADY_ACTIVE, and the next may start 7 days
after one ends (409 BOOST_COOLDOWN).

**Across replicas.** Counters live in PostgreSQL and every control-plane process counts locally, adding
its counts to the shared counter in one statement every second. A process syncs before deciding on a counter
it has not synced for 5 s, and never holds more than A = max(1, floor(limit/100)) requests the database has not
confirmed. One process counts exactly; N processes may together admit at most N*A - 1 requests above a limit in
a window (about N% of it). @fastify/rate-limit was not used: its store is asked on every request, counts refused
requests, applies one limit per route, and reports the reset as seconds rather than a Unix time.`;

function isHighPriority(value: string | string[] | undefined): boolean {
  return typeof value === 'string' && value.trim().toLowerCase() === 'high';
}

function setHeaders(reply: FastifyReply, outcome: RateLimitOutcome): void {
  const { reported } = outcome;
  reply.header('x-ratelimit-limit', reported.limit);
  reply.header('x-ratelimit-remaining', reported.remaining);
  reply.header('x-ratelimit-reset', Math.ceil(reported.resetAt / 1000));
  reply.header('x-ratelimit-window', reported.windowSeconds);
  if (outcome.reserveRemaining !== null)
    reply.header('x-ratelimit-reserve-remaining', outcome.reserveRemaining);
}

/** The 429 of the spec: RATE_LIMITED for a tier limit, RATE_LIMIT_EXCEEDED for an endpoint limit. */
export function rateLimitError(outcome: RateLimitOutcome): ApiError {
  const { reported, retryAfterSeconds: retryAfter } = outcome;
  const details = {
    limit: reported.limit,
    remaining: reported.remaining,
    reset_at: new Date(reported.resetAt).toISOString(),
    retry_after: retryAfter,
    window_seconds: reported.windowSeconds,
    limit_name: reported.name,
  };
  const headers = { 'retry-after': String(retryAfter) };
  const per = reported.windowSeconds === 86_400 ? 'day' : 'hour';
  if (reported.kind === 'endpoint') {
    return new ApiError(
      'RATE_LIMIT_EXCEEDED',
      `${reported.name} is limited to ${reported.limit} requests per ${per}; retry in ${retryAfter} s`,
      details,
      { headers },
    );
  }
  return new ApiError(
    'RATE_LIMITED',
    `rate limit of ${reported.limit} ${reported.name} per ${per} reached; retry in ${retryAfter} s`,
    details,
    { headers, extra: { retry_after: retryAfter } },
  );
}

/**
 * Counts one authenticated request against the account's limits and sets the headers. Returns the refusal
 * (429) or null; a promise only when a counter must be synced with the database first. `route` is the
 * route pattern (`/v2/auth/api-keys/:key_id`), which decides the endpoint limits.
 */
export function admitRequest(
  request: FastifyRequest,
  reply: FastifyReply,
  principal: Principal,
  limits: RateLimitService,
  route: string,
): ApiError | null | Promise<ApiError | null> {
  const outcome = limits.admit(
    principal,
    request.method,
    route,
    isHighPriority(request.headers['x-priority']),
  );
  if (outcome instanceof Promise) return outcome.then((later) => settle(reply, later));
  return settle(reply, outcome);
}

function settle(reply: FastifyReply, outcome: RateLimitOutcome): ApiError | null {
  setHeaders(reply, outcome);
  return outcome.allowed ? null : rateLimitError(outcome);
}

/**
 * The same count for requests the request guard does not see (routes that authenticate themselves:
 * dataset uploads with an upload token or key, WebSocket upgrades): resolves when admitted, throws the
 * 429 otherwise. `reply` gets the headers where there is one (an upgrade has none).
 */
export async function admitOrRefuse(
  limits: RateLimitService,
  account: Pick<Principal, 'accountId' | 'tier'>,
  method: string,
  route: string,
  headers: { priority?: string | string[] | undefined; reply?: FastifyReply | undefined },
): Promise<void> {
  // The limiter reads the account and its tier only; an upload token has no key of its own.
  const outcome = await limits.admit(account as Principal, method, route, isHighPriority(headers.priority));
  if (headers.reply) setHeaders(headers.reply, outcome);
  if (!outcome.allowed) throw rateLimitError(outcome);
}

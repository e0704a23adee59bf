import type { AccountTier } from '@anvil/shared';

/**
 * The rate-limit policy of the spec (Limits), as data and pure functions. Nothing here counts or
 * stores anything: see limiter.ts for counting and service.ts for how the two meet.
 */

export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;

/** The request classes a tier limits per hour. */
export type TierClass = 'read' | 'write' | 'ai';

export interface TierLimits {
  read: number;
  write: number;
  ai: number;
  /** Training jobs created per UTC day; null = unlimited. */
  trainingJobsPerDay: number | null;
}

/**
 * Spec: Rate-limit tiers. The table is followed as written; the spec's prose ("Pro 5x, Enterprise 50x the
 * base") does not match it exactly (Pro reads are 10x Free there).
 */
export const TIER_LIMITS: Readonly<Record<AccountTier, TierLimits>> = {
  free: { read: 100, write: 20, ai: 50, trainingJobsPerDay: 5 },
  pro: { read: 1_000, write: 200, ai: 500, trainingJobsPerDay: 20 },
  enterprise: { read: 10_000, write: 2_000, ai: 5_000, trainingJobsPerDay: null },
};

/** Accounts whose tier the database spells in a way we do not know get the Free limits. */
export function tierLimits(tier: string): TierLimits {
  return (TIER_LIMITS as Record<string, TierLimits | undefined>)[tier] ?? TIER_LIMITS.free;
}

/** Names of the tier limits as the API reports them (GET /v2/auth/rate-limits, 429 details). */
export const TIER_CLASS_NAMES: Readonly<Record<TierClass, string>> = {
  read: 'read_operations',
  write: 'write_operations',
  ai: 'ai_services',
};
export const TRAINING_JOBS_NAME = 'training_jobs';

export interface EndpointRule {
  /** The operation as the spec's table writes it, e.g. `GET /clusters/*`. Also the counter's name. */
  operation: string;
  /** Methods the rule applies to (PATCH counts as PUT; HEAD as GET). */
  methods: readonly string[];
  /** Matches the path with its version prefix removed. */
  path: RegExp;
  /** Requests per hour. */
  limit: number;
}

/** `/x/*` in the spec covers the collection itself and everything below it. */
const under = (root: string) => new RegExp(`^/${root}(?:/.*)?$`);
const exactly = (path: string) => new RegExp(`^${path}$`);
/** The execution API's first segment: an endpoint id, or the route pattern's parameter. */
const EXECUTION_ID = '(?::endpoint_id|ep_[a-z0-9]+)';

/**
 * Spec: Endpoint-specific limits (per hour). The order matters only for readability: a request matches at
 * most one rule because methods and paths do not overlap. Serverless execution under RunPod-style paths
 * (/v2/<endpoint_id>/run and /runsync) counts against the execute rule, and its GET routes
 * (/v2/<endpoint_id>/status, /stream, /health) against the rule of GETs under /endpoints.
 */
export const ENDPOINT_RULES: readonly EndpointRule[] = [
  { operation: 'GET /accounts/*', methods: ['GET', 'HEAD'], path: under('accounts'), limit: 500 },
  { operation: 'POST /accounts/*', methods: ['POST'], path: under('accounts'), limit: 50 },
  { operation: 'PUT /accounts/*', methods: ['PUT', 'PATCH'], path: under('accounts'), limit: 50 },
  { operation: 'DELETE /accounts/*', methods: ['DELETE'], path: under('accounts'), limit: 10 },
  { operation: 'GET /clusters/*', methods: ['GET', 'HEAD'], path: under('clusters'), limit: 1_000 },
  { operation: 'POST /clusters', methods: ['POST'], path: exactly('/clusters'), limit: 20 },
  { operation: 'PUT /clusters/*', methods: ['PUT', 'PATCH'], path: under('clusters'), limit: 100 },
  { operation: 'DELETE /clusters/*', methods: ['DELETE'], path: under('clusters'), limit: 20 },
  {
    operation: 'GET /endpoints/*',
    methods: ['GET', 'HEAD'],
    path: new RegExp(`^/(?:endpoints(?:/.*)?|${EXECUTION_ID}/.+)$`),
    limit: 1_000,
  },
  { operation: 'POST /endpoints', methods: ['POST'], path: exactly('/endpoints'), limit: 50 },
  {
    operation: 'POST /endpoints/*/execute',
    methods: ['POST'],
    path: new RegExp(`^/(?:endpoints/[^/]+/execute|${EXECUTION_ID}/(?:run|runsync))$`),
    limit: 500,
  },
  { operation: 'POST /ai/chat', methods: ['POST'], path: exactly('/ai/chat'), limit: 200 },
  { operation: 'POST /ai/text-to-image', methods: ['POST'], path: exactly('/ai/text-to-image'), limit: 100 },
  { operation: 'POST /ai/text-to-video', methods: ['POST'], path: exactly('/ai/text-to-video'), limit: 20 },
  {
    operation: 'POST /ai/text-to-speech',
    methods: ['POST'],
    path: exactly('/ai/text-to-speech'),
    limit: 150,
  },
  { operation: 'GET /training/*', methods: ['GET', 'HEAD'], path: under('training'), limit: 500 },
  { operation: 'POST /training/jobs', methods: ['POST'], path: exactly('/training/jobs'), limit: 10 },
  { operation: 'PUT /training/*', methods: ['PUT', 'PATCH'], path: under('training'), limit: 50 },
];

/** What a request counts against. */
export interface RouteClass {
  tierClass: TierClass;
  /** The endpoint-specific rule, when the operation is in the table. */
  rule: EndpointRule | null;
  /** POST /training/jobs also counts against the tier's training jobs per day. */
  trainingJob: boolean;
}

const VERSION_PREFIX = /^\/v\d+(?=\/|$)/;

/** `/v2/clusters/:id?x=1` → `/clusters/:id`. Paths are matched with or without a version prefix. */
export function unversionedPath(url: string): string {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return path.replace(VERSION_PREFIX, '') || '/';
}

/**
 * Classifies a request by method and path (a route pattern such as `/v2/clusters/:id` works as well as a
 * concrete path). Read = GET/HEAD/OPTIONS, write = every other method, AI = anything under /ai.
 */
export function classify(method: string, url: string): RouteClass {
  const path = unversionedPath(url);
  const verb = method.toUpperCase();
  const tierClass: TierClass =
    path === '/ai' || path.startsWith('/ai/')
      ? 'ai'
      : verb === 'GET' || verb === 'HEAD' || verb === 'OPTIONS'
        ? 'read'
        : 'write';
  const rule = ENDPOINT_RULES.find((r) => r.methods.includes(verb) && r.path.test(path)) ?? null;
  return { tierClass, rule, trainingJob: verb === 'POST' && path === '/training/jobs' };
}

/** Share of a limit that `X-Priority: high` requests may use once the limit itself is spent. */
export const PRIORITY_RESERVE_FRACTION = 0.1;

/** The reserve above `limit` open to `X-Priority: high` requests: 10%, at least one request. */
export function priorityReserve(limit: number): number {
  return Math.max(1, Math.ceil(limit * PRIORITY_RESERVE_FRACTION));
}

/** A base limit under a boost multiplier (never below the base, always a whole number). */
export function boosted(limit: number, multiplier: number): number {
  return Math.max(limit, Math.floor(limit * multiplier));
}

/** Start of the fixed window holding `nowMs`: UTC clock hours and UTC days. */
export function windowStart(nowMs: number, windowMs: number): number {
  return Math.floor(nowMs / windowMs) * windowMs;
}

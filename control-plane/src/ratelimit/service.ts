import type { AccessControl, Actor } from '../accounts/access.ts';
import type { AuditLog } from '../accounts/audit.ts';
import type { Clock } from '../auth/clock.ts';
import type { Principal } from '../auth/principal.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { type Boost, BoostRegistry, type BoostRequest } from './boosts.ts';
import { type CounterStore, SqlCounterStore } from './counter-store.ts';
import { type Admission, type LimitCheck, SharedCounterLimiter } from './limiter.ts';
import {
  boosted,
  classify,
  DAY_MS,
  ENDPOINT_RULES,
  type EndpointRule,
  HOUR_MS,
  PRIORITY_RESERVE_FRACTION,
  priorityReserve,
  type RouteClass,
  TIER_CLASS_NAMES,
  type TierClass,
  TRAINING_JOBS_NAME,
  tierLimits,
  windowStart,
} from './policy.ts';

/** Tier limits answer 429 RATE_LIMITED; endpoint-specific limits 429 RATE_LIMIT_EXCEEDED. */
export type LimitKind = 'tier' | 'endpoint';

interface NamedCheck extends LimitCheck {
  kind: LimitKind;
  /** `read_operations`, `training_jobs`, or the operation of an endpoint rule (`POST /clusters`). */
  name: string;
}

/** One limit as it stands for the caller: what the X-RateLimit-* headers and 429 bodies report. */
export interface LimitState {
  kind: LimitKind;
  name: string;
  limit: number;
  remaining: number;
  /** Unix ms at which the window ends and the count starts again. */
  resetAt: number;
  windowSeconds: number;
}

export interface RateLimitOutcome {
  allowed: boolean;
  /** The most restrictive applicable limit (fewest requests left), or the one that refused. */
  reported: LimitState;
  /** On `X-Priority: high` requests: what is left of the reserve of the most restrictive limit. */
  reserveRemaining: number | null;
  /** Seconds until the refusing limit frees up (0 when admitted). */
  retryAfterSeconds: number;
}

/** Spec's shape for one limit in GET /v2/auth/rate-limits. */
export interface LimitView {
  limit: number | null;
  remaining: number | null;
  reset_at: string;
  window_seconds: number;
  /** The limit without the boost. */
  base_limit: number | null;
}

export interface RateLimitStatus {
  tier: string;
  limits: Record<'read_operations' | 'write_operations' | 'ai_services' | 'training_jobs', LimitView>;
  endpoint_limits: Array<LimitView & { operation: string }>;
  boost: Boost | null;
  priority_reserve: { fraction: number };
}

export interface RateLimitServiceOptions {
  db: Database;
  clock: Clock;
  /** Who may ask for a boost (manage_billing), and where boosts are recorded. */
  access: AccessControl;
  audit: AuditLog;
  /** Defaults to the database's rate_limit_counters table. */
  store?: CounterStore;
  syncIntervalMs?: number;
  /** Where failed background syncs and boost reloads are logged. */
  logger?: Logger;
}

/** Seconds until `resetAt`, at least 1: what Retry-After says. */
function secondsUntil(resetAt: number, now: number): number {
  return Math.max(1, Math.ceil((resetAt - now) / 1000));
}

/**
 * The rate limits of the spec (Limits) applied to an account: which limits a request counts against
 * (policy.ts), with the account's boost, counted in counters shared by every process (limiter.ts).
 * Limits are per account, whatever key is used: more keys never mean more requests.
 */
export class RateLimitService {
  readonly limiter: SharedCounterLimiter;
  readonly boosts: BoostRegistry;
  private readonly routeClasses = new Map<string, Map<string, RouteClass>>();
  private readonly checkCache = new Map<
    string,
    Map<RouteClass, { tier: string; multiplier: number; checks: NamedCheck[] }>
  >();

  constructor(private readonly options: RateLimitServiceOptions) {
    this.limiter = new SharedCounterLimiter({
      store: options.store ?? new SqlCounterStore(options.db.sql),
      clock: options.clock,
      ...(options.logger ? { logger: options.logger } : {}),
      ...(options.syncIntervalMs === undefined ? {} : { syncIntervalMs: options.syncIntervalMs }),
    });
    this.boosts = new BoostRegistry(options.db, options.clock, options.access, options.audit, options.logger);
  }

  async start(): Promise<void> {
    await this.boosts.start();
    await this.limiter.start();
  }

  async stop(): Promise<void> {
    await this.limiter.stop();
    await this.boosts.stop();
  }

  /** Classification depends on the route pattern only, so it is computed once per method and route. */
  private classOf(method: string, route: string): RouteClass {
    let byRoute = this.routeClasses.get(method);
    if (!byRoute) {
      byRoute = new Map();
      this.routeClasses.set(method, byRoute);
    }
    let found = byRoute.get(route);
    if (!found) {
      found = classify(method, route);
      if (byRoute.size < 10_000) byRoute.set(route, found);
    }
    return found;
  }

  /**
   * The checks of an account's requests of one route class, kept while its tier and boost stay the same,
   * so the request path builds no strings or objects for them.
   */
  private checksFor(principal: Principal, routeClass: RouteClass, multiplier: number): NamedCheck[] {
    let byClass = this.checkCache.get(principal.accountId);
    if (!byClass) {
      if (this.checkCache.size >= 10_000) this.checkCache.clear();
      byClass = new Map();
      this.checkCache.set(principal.accountId, byClass);
    }
    const cached = byClass.get(routeClass);
    if (cached && cached.tier === principal.tier && cached.multiplier === multiplier) return cached.checks;
    const checks = this.checks(principal, routeClass, multiplier);
    byClass.set(routeClass, { tier: principal.tier, multiplier, checks });
    return checks;
  }

  private checks(principal: Principal, routeClass: RouteClass, multiplier: number): NamedCheck[] {
    const account = principal.accountId;
    const tier = tierLimits(principal.tier);
    const name = TIER_CLASS_NAMES[routeClass.tierClass];
    const checks: NamedCheck[] = [
      {
        kind: 'tier',
        name,
        bucket: `${account}:${name}`,
        windowMs: HOUR_MS,
        limit: boosted(tier[routeClass.tierClass], multiplier),
      },
    ];
    if (routeClass.rule) checks.push(this.ruleCheck(account, routeClass.rule, multiplier));
    if (routeClass.trainingJob && tier.trainingJobsPerDay !== null) {
      checks.push(this.trainingCheck(account, tier.trainingJobsPerDay, multiplier));
    }
    return checks;
  }

  private ruleCheck(account: string, rule: EndpointRule, multiplier: number): NamedCheck {
    return {
      kind: 'endpoint',
      name: rule.operation,
      bucket: `${account}:${rule.operation}`,
      windowMs: HOUR_MS,
      limit: boosted(rule.limit, multiplier),
    };
  }

  private trainingCheck(account: string, perDay: number, multiplier: number): NamedCheck {
    return {
      kind: 'tier',
      name: TRAINING_JOBS_NAME,
      bucket: `${account}:${TRAINING_JOBS_NAME}`,
      windowMs: DAY_MS,
      limit: boosted(perDay, multiplier),
    };
  }

  /**
   * Counts one request against every limit that applies to it (tier and endpoint-specific: the most
   * restrictive wins), or refuses it without counting it.
   */
  admit(
    principal: Principal,
    method: string,
    route: string,
    priority: boolean,
  ): RateLimitOutcome | Promise<RateLimitOutcome> {
    const now = this.options.clock.now().getTime();
    const multiplier = this.boosts.multiplierFor(principal.accountId, now);
    const checks = this.checksFor(principal, this.classOf(method, route), multiplier);
    // Decided at once unless a counter must be synced first (then the request waits for the sync).
    const admission = this.limiter.tryAcquire(checks, priority, now);
    if (admission) return this.outcome(checks, admission, priority, now);
    return this.limiter.acquire(checks, priority).then((later) => this.outcome(checks, later, priority, now));
  }

  private outcome(
    checks: NamedCheck[],
    admission: Admission,
    priority: boolean,
    now: number,
  ): RateLimitOutcome {
    let index = admission.refusedBy;
    if (index === -1) {
      // The limit with the fewest requests left; on a tie the smaller limit.
      index = 0;
      for (let i = 1; i < checks.length; i++) {
        const left = checks[i]!.limit - admission.counts[i]!;
        const best = checks[index]!.limit - admission.counts[index]!;
        if (left < best || (left === best && checks[i]!.limit < checks[index]!.limit)) index = i;
      }
    }
    const check = checks[index]!;
    const count = admission.counts[index]!;
    const resetAt = admission.resetsAt[index]!;
    return {
      allowed: admission.allowed,
      reported: {
        kind: check.kind,
        name: check.name,
        limit: check.limit,
        remaining: admission.allowed ? Math.max(0, check.limit - count) : 0,
        resetAt,
        windowSeconds: check.windowMs / 1000,
      },
      reserveRemaining: priority
        ? Math.min(
            ...checks.map((c, i) => Math.max(0, c.limit + priorityReserve(c.limit) - admission.counts[i]!)),
          )
        : null,
      retryAfterSeconds: admission.allowed ? 0 : secondsUntil(resetAt, now),
    };
  }

  /** Every limit of the account with its real count (GET /v2/auth/rate-limits). */
  async status(principal: Principal): Promise<RateLimitStatus> {
    const now = this.options.clock.now().getTime();
    const boost = this.boosts.activeFor(principal.accountId, now);
    const multiplier = boost?.multiplier ?? 1;
    const tier = tierLimits(principal.tier);
    const account = principal.accountId;
    const classes: TierClass[] = ['read', 'write', 'ai'];
    const checks: NamedCheck[] = [
      ...classes.map(
        (c): NamedCheck => ({
          kind: 'tier',
          name: TIER_CLASS_NAMES[c],
          bucket: `${account}:${TIER_CLASS_NAMES[c]}`,
          windowMs: HOUR_MS,
          limit: boosted(tier[c], multiplier),
        }),
      ),
      this.trainingCheck(account, tier.trainingJobsPerDay ?? 0, multiplier),
      ...ENDPOINT_RULES.map((rule) => this.ruleCheck(account, rule, multiplier)),
    ];
    const counts = await this.limiter.usage(checks);
    const view = (i: number, base: number | null): LimitView => {
      const check = checks[i]!;
      const start = windowStart(now, check.windowMs);
      const unlimited = base === null;
      return {
        limit: unlimited ? null : check.limit,
        remaining: unlimited ? null : Math.max(0, check.limit - counts[i]!),
        reset_at: new Date(start + check.windowMs).toISOString(),
        window_seconds: check.windowMs / 1000,
        base_limit: base,
      };
    };
    return {
      tier: principal.tier,
      limits: {
        read_operations: view(0, tier.read),
        write_operations: view(1, tier.write),
        ai_services: view(2, tier.ai),
        training_jobs: view(3, tier.trainingJobsPerDay),
      },
      endpoint_limits: ENDPOINT_RULES.map((rule, i) => ({
        operation: rule.operation,
        ...view(4 + i, rule.limit),
      })),
      boost,
      priority_reserve: { fraction: PRIORITY_RESERVE_FRACTION },
    };
  }

  /** Records a boost (manage_billing, bounded, one at a time, cooled down) and answers the limits now. */
  async boost(actor: Actor, request: BoostRequest): Promise<{ boost: Boost; status: RateLimitStatus }> {
    const boost = await this.boosts.create(actor, request);
    return { boost, status: await this.status(actor.principal) };
  }
}

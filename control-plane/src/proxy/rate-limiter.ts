import type { LimitCheck, SharedCounterLimiter } from '../ratelimit/limiter.ts';
import type { RateLimit } from './types.ts';

/** Shortest counting window: below it a window would end before the replicas' counters could sync. */
export const MIN_WINDOW_MS = 1_000;

/**
 * A `{requests_per_minute, burst_size}` limit as one fixed-window counter of the shared limiter: at most
 * burst_size requests per burst_size / requests_per_minute minutes, which is the token bucket's long-run
 * rate and its burst. A window that would be shorter than MIN_WINDOW_MS is widened to it, its limit
 * scaled (requests_per_minute / 60 per second). The window length is part of the bucket name, so a
 * changed limit starts a counter of its own instead of inheriting one of another length.
 */
export function windowCheck(bucket: string, limit: RateLimit): LimitCheck {
  const burst = Math.max(1, limit.burst_size);
  const windowMs = Math.max(MIN_WINDOW_MS, Math.round((burst * 60_000) / limit.requests_per_minute));
  const scaled = Math.floor((limit.requests_per_minute * windowMs) / 60_000);
  return { bucket: `proxy:${bucket}:${windowMs}`, windowMs, limit: Math.max(burst, scaled) };
}

/** One limit a request counts against; `name` is what the 429 names. */
export interface ProxyLimit {
  bucket: string;
  limit: RateLimit;
  name: string;
}

export interface ProxyRefusal {
  name: string;
  limit: RateLimit;
  /** Seconds until the refusing window ends (Retry-After), at least 1. */
  retryAfterSeconds: number;
}

/**
 * The proxy's global, per-user and per-port limits, counted in the counters every control-plane process
 * shares (ratelimit/limiter.ts: local counting, batched sync, bounded error). A request counts against
 * all of its limits or, when one refuses, against none.
 */
export class ProxyRateLimits {
  constructor(private readonly limiter: SharedCounterLimiter) {}

  /** null when admitted; else the limit that frees up last. */
  async admit(limits: readonly ProxyLimit[], nowMs: number): Promise<ProxyRefusal | null> {
    if (limits.length === 0) return null;
    const checks = limits.map((l) => windowCheck(l.bucket, l.limit));
    // Usually decided from local counts; a counter first seen, stale or at its unconfirmed allowance
    // waits for one (shared) sync.
    const admission = this.limiter.tryAcquire(checks, false, nowMs) ?? (await this.limiter.acquire(checks));
    if (admission.allowed) return null;
    const refused = limits[admission.refusedBy]!;
    return {
      name: refused.name,
      limit: refused.limit,
      retryAfterSeconds: Math.max(1, Math.ceil((admission.resetsAt[admission.refusedBy]! - nowMs) / 1000)),
    };
  }
}

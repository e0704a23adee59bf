import type { RateLimit } from './types.ts';

interface Bucket {
  tokens: number;
  updatedMs: number;
}

/**
 * Token buckets held in this process: `burst_size` tokens, refilled at `requests_per_minute / 60` per
 * second. With several control-plane replicas each enforces its own buckets (documented).
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();

  /** Takes a token; returns 0 when allowed, else the seconds until one is available (Retry-After). */
  take(key: string, limit: RateLimit, nowMs: number): number {
    const rate = limit.requests_per_minute / 60_000;
    const capacity = Math.max(1, limit.burst_size);
    const bucket = this.buckets.get(key) ?? { tokens: capacity, updatedMs: nowMs };
    bucket.tokens = Math.min(capacity, bucket.tokens + (nowMs - bucket.updatedMs) * rate);
    bucket.updatedMs = nowMs;
    this.buckets.set(key, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / rate / 1000));
  }

  /** Drops buckets that have refilled completely (idle long enough that forgetting them changes nothing). */
  sweep(nowMs: number, maxIdleMs = 600_000): void {
    for (const [key, bucket] of this.buckets) {
      if (nowMs - bucket.updatedMs > maxIdleMs) this.buckets.delete(key);
    }
  }
}

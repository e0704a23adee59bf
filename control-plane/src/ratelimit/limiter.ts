import type { Clock } from '../auth/clock.ts';
import { type Logger, silentLogger } from '../logger.ts';
import { coalesced } from '../util/coalesce.ts';
import { type CounterRef, type CounterStore, counterKey } from './counter-store.ts';
import { priorityReserve, windowStart } from './policy.ts';

/**
 * Fixed-window counters shared by every control-plane process, counted locally and synced in batches.
 *
 * Why not @fastify/rate-limit with a shared store: its store is asked on every request (a database round
 * trip per request across replicas), it counts refused requests too (a refused request must not count
 * here), it applies one limit per route (we apply a tier limit, an endpoint limit and a daily training
 * limit at once and report the most restrictive), and its reset header is seconds-until-reset where the
 * spec wants a Unix time. What it would add over this file is a hook and a header writer.
 *
 * The algorithm. Each process keeps, per counter (bucket x window), the shared total it last read from
 * the database (`synced`) and the requests it admitted since (`pending`, then `inflight` while being
 * written). A request is admitted when `synced + pending + inflight < limit`. Every `syncIntervalMs`
 * (1 s by default, 2.5 s on PGlite, and on demand) one statement adds all pending deltas atomically (`count = count + delta`) and reads
 * back the totals, which include every other process's deltas. Two rules bound the error:
 *   - a counter seen for the first time, or not synced for `staleAfterMs`, is synced before deciding;
 *   - a process holds at most A = max(1, floor(limit / 100)) admissions of a counter that the database
 *     has not confirmed; the next request waits for a sync.
 * A refusal needs no sync: the local estimate never exceeds the true total, so a process that sees the
 * limit reached is right. With one process the count is exact. With N processes, once the shared total
 * reaches the limit each process can still admit at most its A unconfirmed requests, so at most
 * N*A - 1 requests above the limit are admitted per window (about N% of the limit; N-1 for limits under
 * 200). If the database cannot be reached, each process goes on counting on its own and retries.
 */

export interface LimitCheck {
  /** What is counted, e.g. `acc_x:read`; one counter per bucket and window. */
  bucket: string;
  windowMs: number;
  /** Requests per window for ordinary requests. */
  limit: number;
}

export interface Admission {
  allowed: boolean;
  /** Index of the check that refused (the one that frees up last), or -1. */
  refusedBy: number;
  /** Per check: requests counted in its current window, this one included when admitted. */
  counts: number[];
  /** Per check: Unix ms at which its window ends. */
  resetsAt: number[];
}

export interface LimiterOptions {
  store: CounterStore;
  clock: Clock;
  syncIntervalMs?: number;
  staleAfterMs?: number;
  purgeIntervalMs?: number;
  logger?: Logger;
}

/** Admissions a process may make on a counter before the database has confirmed them. */
export function unconfirmedAllowance(limit: number): number {
  return Math.max(1, Math.floor(limit / 100));
}

interface Counter {
  key: string;
  bucket: string;
  windowStart: number;
  expiresAt: number;
  synced: number;
  pending: number;
  inflight: number;
  syncedAt: number;
  touchedAt: number;
  /** Dropped from memory (its total is in the database): a later request must not count into it. */
  evicted: boolean;
}

/** A counter nobody touched for this long is dropped from memory (the database keeps its total). */
const IDLE_EVICT_MS = 60_000;
/** After a failed sync, decide locally for this long before asking the database again. */
const DEGRADED_MS = 1_000;

export class SharedCounterLimiter {
  private readonly counters = new Map<string, Counter>();
  /** The latest counter of each bucket, so the request path needs no bucket-and-window key. */
  private readonly current = new Map<string, Counter>();
  private readonly store: CounterStore;
  private readonly clock: Clock;
  private readonly syncIntervalMs: number;
  private readonly staleAfterMs: number;
  private readonly purgeIntervalMs: number;
  private readonly logger: Logger;
  private degradedUntil = 0;
  private timers: NodeJS.Timeout[] = [];
  /** Adds every pending delta to the store and refreshes recently used counters; calls share runs. */
  readonly sync: () => Promise<void>;

  constructor(options: LimiterOptions) {
    this.store = options.store;
    this.clock = options.clock;
    // Every second on a database server; every 2.5 s (still well inside staleAfterMs) where each sync
    // runs in the API's own thread (PGlite), whose only process counts exactly whatever the interval.
    this.syncIntervalMs = options.syncIntervalMs ?? (options.store.inThread ? 2_500 : 1_000);
    this.staleAfterMs = options.staleAfterMs ?? 5_000;
    // Expired counters are only dead rows (never read): every minute on a server, every 10 min where the
    // DELETE runs in the API's own thread.
    this.purgeIntervalMs = options.purgeIntervalMs ?? (options.store.inThread ? 600_000 : 60_000);
    this.logger = options.logger ?? silentLogger;
    this.sync = coalesced(() => this.flush());
  }

  async start(): Promise<void> {
    await this.purge();
    const every = (ms: number, run: () => Promise<unknown>) => {
      const timer = setInterval(() => void run(), ms);
      timer.unref();
      this.timers.push(timer);
    };
    every(this.syncIntervalMs, () => this.syncQuietly());
    every(this.purgeIntervalMs, () => this.purge());
  }

  /** Stops the timers and writes what is still pending, so no admitted request goes uncounted. */
  async stop(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    this.timers = [];
    await this.syncQuietly();
  }

  /**
   * Admits the request when every check has room, counting it against all of them; otherwise counts
   * nothing. `priority` requests may also use the reserve above each limit (policy.priorityReserve).
   */
  async acquire(checks: readonly LimitCheck[], priority = false): Promise<Admission> {
    for (;;) {
      const admission = this.tryAcquire(checks, priority, this.clock.now().getTime());
      if (admission) return admission;
      await this.syncQuietly();
    }
  }

  /**
   * The same decision without waiting, for the request path: null when a counter must be synced first
   * (first sight, stale, or A unconfirmed admissions); then nothing was counted and acquire() is the way.
   */
  tryAcquire(checks: readonly LimitCheck[], priority: boolean, now: number): Admission | null {
    const counters: Counter[] = new Array(checks.length);
    let refusedBy = -1;
    let mustSync = false;
    for (let i = 0; i < checks.length; i++) {
      const check = checks[i]!;
      const counter = this.counterFor(check, now);
      counters[i] = counter;
      counter.touchedAt = now;
      const cap = priority ? check.limit + priorityReserve(check.limit) : check.limit;
      const unconfirmed = counter.pending + counter.inflight;
      if (counter.synced + unconfirmed >= cap) {
        if (refusedBy === -1 || counter.expiresAt > counters[refusedBy]!.expiresAt) refusedBy = i;
      } else if (
        now - counter.syncedAt > this.staleAfterMs ||
        unconfirmed >= unconfirmedAllowance(check.limit)
      ) {
        mustSync = true;
      }
    }
    if (refusedBy === -1 && mustSync && now >= this.degradedUntil) return null;
    const counts: number[] = new Array(checks.length);
    const resetsAt: number[] = new Array(checks.length);
    for (let i = 0; i < counters.length; i++) {
      const counter = counters[i]!;
      if (refusedBy === -1) counter.pending++;
      counts[i] = counter.synced + counter.pending + counter.inflight;
      resetsAt[i] = counter.expiresAt;
    }
    return { allowed: refusedBy === -1, refusedBy, counts, resetsAt };
  }

  /** Current totals of these checks' windows, as the database has them after this process's sync. */
  async usage(checks: readonly LimitCheck[]): Promise<number[]> {
    await this.sync();
    const now = this.clock.now().getTime();
    const refs: CounterRef[] = checks.map((check) => {
      const start = windowStart(now, check.windowMs);
      return { bucket: check.bucket, windowStart: start, expiresAt: start + check.windowMs };
    });
    const totals = await this.store.read(refs);
    return refs.map((ref) => {
      const key = counterKey(ref.bucket, ref.windowStart);
      const total = totals.get(key) ?? 0;
      const local = this.counters.get(key);
      if (!local) return total;
      local.synced = Math.max(local.synced, total);
      return local.synced + local.pending + local.inflight;
    });
  }

  private counterFor(check: LimitCheck, now: number): Counter {
    // Fast path: the bucket's counter of the current window, found by the bucket name alone.
    const current = this.current.get(check.bucket);
    if (current && !current.evicted && now >= current.windowStart && now < current.expiresAt) return current;
    const start = windowStart(now, check.windowMs);
    const key = counterKey(check.bucket, start);
    let counter = this.counters.get(key);
    if (!counter) {
      counter = {
        key,
        bucket: check.bucket,
        windowStart: start,
        expiresAt: start + check.windowMs,
        synced: 0,
        pending: 0,
        inflight: 0,
        syncedAt: Number.NEGATIVE_INFINITY,
        touchedAt: now,
        evicted: false,
      };
      this.counters.set(key, counter);
    }
    this.current.set(check.bucket, counter);
    return counter;
  }

  private async syncQuietly(): Promise<void> {
    try {
      await this.sync();
    } catch (error) {
      this.degradedUntil = this.clock.now().getTime() + DEGRADED_MS;
      this.logger.warn({ err: error }, 'rate-limit counters could not be synced; counting locally');
    }
  }

  private async flush(): Promise<void> {
    const now = this.clock.now().getTime();
    const batch: Counter[] = [];
    for (const [key, counter] of this.counters) {
      if (counter.pending > 0 || counter.touchedAt >= counter.syncedAt) batch.push(counter);
      else if (
        counter.inflight === 0 &&
        (counter.expiresAt <= now || now - counter.touchedAt > IDLE_EVICT_MS)
      ) {
        counter.evicted = true;
        this.counters.delete(key);
        if (this.current.get(counter.bucket) === counter) this.current.delete(counter.bucket);
      }
    }
    if (batch.length === 0) return;
    // In pieces as large as the store takes in one statement; each piece is confirmed or returned alone,
    // so a failure part-way never counts a piece twice.
    const size = this.store.maxBatch ?? batch.length;
    for (let start = 0; start < batch.length; start += size) {
      if (start > 0) await this.store.betweenBatches?.();
      await this.flushPiece(batch.slice(start, start + size));
    }
  }

  private async flushPiece(batch: Counter[]): Promise<void> {
    const deltas = batch.map((counter) => {
      const delta = counter.pending;
      counter.pending = 0;
      counter.inflight += delta;
      return delta;
    });
    let totals: Map<string, number>;
    try {
      totals = await this.store.add(
        batch.map((counter, i) => ({
          bucket: counter.bucket,
          windowStart: counter.windowStart,
          expiresAt: counter.expiresAt,
          delta: deltas[i]!,
        })),
      );
    } catch (error) {
      batch.forEach((counter, i) => {
        counter.inflight -= deltas[i]!;
        counter.pending += deltas[i]!;
      });
      throw error;
    }
    const syncedAt = this.clock.now().getTime();
    batch.forEach((counter, i) => {
      counter.inflight -= deltas[i]!;
      counter.synced = totals.get(counter.key) ?? 0;
      counter.syncedAt = syncedAt;
    });
  }

  private async purge(): Promise<void> {
    try {
      await this.store.purgeExpired(this.clock.now().getTime());
    } catch (error) {
      this.logger.warn({ err: error }, 'expired rate-limit counters could not be purged');
    }
  }
}

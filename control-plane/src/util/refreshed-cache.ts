import type { Logger } from '../logger.ts';

export interface RefreshedCacheOptions<V> {
  /**
   * The current values of these keys, in one round trip; a key missing from the answer no longer exists
   * and is dropped.
   */
  loadMany(keys: string[]): Promise<Map<string, V>>;
  /** How often the entries used since the last refresh are reloaded, together. */
  refreshEveryMs: number;
  /** An entry older than this is never served (its refresh failed or is late): the caller loads it. */
  maxAgeMs: number;
  /** Unix ms now (the owner's clock). */
  now(): number;
  /** Keys per loadMany call. */
  batchSize?: number;
  /** Entries kept at most; beyond, the oldest is dropped. */
  maxEntries?: number;
  logger?: Logger;
  /** Names the cache in the warning logged when a refresh fails. */
  name: string;
}

interface Entry<V> {
  value: V;
  /** When the value was read from the database (Unix ms, by the owner's clock). */
  at: number;
  used: boolean;
}

/**
 * A cache of database rows read on the request path (API keys, account address lists) that is kept
 * fresh in the background instead of expiring under a request: every `refreshEveryMs`, the entries used
 * since the previous refresh are reloaded in one query (the others age out at `maxAgeMs`), so a busy
 * control plane pays one query per interval for all its callers rather than one per caller and expiry,
 * and no request waits for the database once its key is known. A value is never served older than
 * `maxAgeMs`. Invalidation (clear, delete) is immediate and wins over a refresh already in flight.
 * The timer runs only while entries are in use: an idle process keeps none.
 */
export class RefreshedCache<V> {
  private readonly entries = new Map<string, Entry<V>>();
  /** Bumped by every invalidation: a refresh started before one must not write its older answer. */
  private generation = 0;
  private timer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly options: RefreshedCacheOptions<V>) {}

  /** The value when cached and not older than maxAgeMs; marks it used, so the next refresh reloads it. */
  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (this.options.now() - entry.at > this.options.maxAgeMs) {
      this.entries.delete(key);
      return undefined;
    }
    entry.used = true;
    return entry.value;
  }

  /**
   * Stores a value the caller read at `readAt`. A value read before the latest invalidation is refused
   * (returns false): the caller passes the generation it saw before reading.
   */
  set(key: string, value: V, readAt: number, generationBefore: number): boolean {
    if (generationBefore !== this.generation) return false;
    if (!this.entries.has(key) && this.entries.size >= (this.options.maxEntries ?? 100_000)) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(key, { value, at: readAt, used: true });
    this.arm();
    return true;
  }

  /** The invalidation count now; pass it to set() after reading a value. */
  get currentGeneration(): number {
    return this.generation;
  }

  delete(key: string): void {
    this.generation++;
    this.entries.delete(key);
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }

  /** Stops refreshing (for good) and forgets every entry; values set later are served until maxAgeMs. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.clear();
    await this.refreshing;
  }

  private arm(): void {
    if (this.timer || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.refreshing = this.refresh().finally(() => {
        this.refreshing = null;
        if (this.entries.size > 0) this.arm();
      });
    }, this.options.refreshEveryMs);
    this.timer.unref();
  }

  /** Reloads the entries used since the last refresh and drops those past maxAgeMs. Never throws. */
  async refresh(): Promise<void> {
    const keys: string[] = [];
    const now = this.options.now();
    for (const [key, entry] of this.entries) {
      if (entry.used) {
        entry.used = false;
        keys.push(key);
      } else if (now - entry.at > this.options.maxAgeMs) {
        // Unused for a while: not worth a re-read; kept (a caller back after a pause still finds it)
        // until it is too old to serve.
        this.entries.delete(key);
      }
    }
    const size = this.options.batchSize ?? 500;
    for (let start = 0; start < keys.length; start += size) {
      const batch = keys.slice(start, start + size);
      const generation = this.generation;
      const readAt = this.options.now();
      let found: Map<string, V>;
      try {
        found = await this.options.loadMany(batch);
      } catch (error) {
        // The entries keep their age: past maxAgeMs the request path loads them itself.
        this.options.logger?.warn(
          { err: error, keys: batch.length },
          `refreshing the ${this.options.name} cache failed; entries are reloaded when they expire`,
        );
        continue;
      }
      if (generation !== this.generation) continue;
      for (const key of batch) {
        const entry = this.entries.get(key);
        if (!entry) continue;
        const value = found.get(key);
        if (value === undefined) this.entries.delete(key);
        else {
          entry.value = value;
          entry.at = readAt;
        }
      }
    }
  }
}

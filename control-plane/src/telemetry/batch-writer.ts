export interface BatchWriterOptions<T> {
  /** Writes one batch in one statement; throws to have it retried. */
  write: (rows: T[]) => Promise<void>;
  /** How long a row may wait for its batch. */
  flushIntervalMs: number;
  /** Rows per statement; a buffer this full is flushed at once. */
  maxBatch: number;
  /** Rows held while the database is slow or away; beyond this, new rows are dropped and counted. */
  maxPending: number;
  /** Consecutive failures of one batch before it is dropped (so one bad row cannot stop the writer). */
  maxAttempts?: number;
  onDropped?: (rows: number, reason: 'overflow' | 'failed') => void;
  onError?: (error: unknown, rows: number) => void;
}

/**
 * Buffers rows from many agent connections and writes them in large batches, one batch at a time:
 * thousands of hosts sending a few rows each become a few statements a second. Bounded: when the
 * database falls behind, the oldest rows stay queued and new ones are dropped and counted.
 */
export class BatchWriter<T> {
  readonly #o: Required<Omit<BatchWriterOptions<T>, 'onDropped' | 'onError'>> &
    Pick<BatchWriterOptions<T>, 'onDropped' | 'onError'>;
  #pending: T[] = [];
  #running: Promise<void> | null = null;
  #followUp: Promise<void> | null = null;
  /** Set while rows wait for their flush; none while the buffer is empty (an idle writer never wakes). */
  #timer: NodeJS.Timeout | null = null;
  #started = false;
  #failures = 0;

  constructor(options: BatchWriterOptions<T>) {
    this.#o = { maxAttempts: 3, ...options };
  }

  get pending(): number {
    return this.#pending.length;
  }

  /** Queues rows; returns how many were accepted. A full batch starts a write at once. */
  add(rows: T[]): number {
    const room = Math.max(0, this.#o.maxPending - this.#pending.length);
    const accepted = rows.length <= room ? rows : rows.slice(0, room);
    if (accepted.length < rows.length) this.#o.onDropped?.(rows.length - accepted.length, 'overflow');
    for (const row of accepted) this.#pending.push(row);
    if (this.#pending.length >= this.#o.maxBatch) void this.flush();
    else this.#arm();
    return accepted.length;
  }

  /** Writes everything queued so far (and whatever arrives meanwhile); never rejects. */
  flush(): Promise<void> {
    if (this.#running) {
      // One follow-up run, shared by every caller that arrives while a run is under way.
      this.#followUp ??= this.#running.then(() => {
        this.#followUp = null;
        return this.flush();
      });
      return this.#followUp;
    }
    if (this.#pending.length === 0) return Promise.resolve();
    this.#running = this.#drain().finally(() => {
      this.#running = null;
      // Rows that came meanwhile, or a failed batch back at the front, get their own wait.
      this.#arm();
    });
    return this.#running;
  }

  async #drain(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending.splice(0, this.#o.maxBatch);
      try {
        await this.#o.write(batch);
        this.#failures = 0;
      } catch (error) {
        this.#failures += 1;
        this.#o.onError?.(error, batch.length);
        if (this.#failures >= this.#o.maxAttempts) {
          this.#failures = 0;
          this.#o.onDropped?.(batch.length, 'failed');
        } else {
          // Back to the front, and wait a flush interval rather than hammering a failing database.
          const room = Math.max(0, this.#o.maxPending - this.#pending.length);
          const kept = batch.slice(0, room);
          if (kept.length < batch.length) this.#o.onDropped?.(batch.length - kept.length, 'overflow');
          this.#pending.unshift(...kept);
        }
        return;
      }
    }
  }

  start(): void {
    this.#started = true;
    this.#arm();
  }

  /**
   * A flush flushIntervalMs after the first row that waits for one (or after a failed batch went back
   * to the front), instead of a tick every flushIntervalMs: with nothing queued, no timer runs.
   */
  #arm(): void {
    if (!this.#started || this.#timer || this.#pending.length === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, this.#o.flushIntervalMs);
    this.#timer.unref();
  }

  /** Stops the timer and writes what is left (one attempt per batch). */
  async stop(): Promise<void> {
    this.#started = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.flush();
    if (this.#pending.length > 0) await this.flush();
  }
}

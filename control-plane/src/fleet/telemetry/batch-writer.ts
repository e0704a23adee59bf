/**
 * Where rows wait for their batch. By default a bounded queue (BatchWriter.add); a writer that sums
 * what it is given (the request log's per-minute rollups, the proxy's per-cluster rings) keeps its own,
 * fills it itself and tells the writer (BatchWriter.queued).
 */
export interface BatchBuffer<T> {
  /** Rows waiting. */
  readonly size: number;
  /**
   * The next rows to write, in order, taken out of the buffer: at least `max` when it holds that many
   * (the queue takes one batch at a time; a buffer sorting what it holds takes everything).
   */
  drain(max: number): T[];
  /** Rows a failed write did not store, back ahead of whatever came meanwhile (within the buffer's bound). */
  putBack(rows: T[]): void;
}

export interface BatchWriterOptions<T> {
  /** Writes one batch in one statement; throws to have it retried. */
  write: (rows: T[]) => Promise<void>;
  /** How long a row may wait for its batch. */
  flushIntervalMs: number;
  /** Rows per statement. */
  maxBatch: number;
  /** A buffer holding this many rows is flushed at once (default maxBatch; Infinity: only on the timer). */
  flushAt?: number;
  /** The default queue's bound: rows held while the database is slow or away; beyond it new rows drop. */
  maxPending?: number;
  /** A buffer of the owner's instead of the default queue (then maxPending is the buffer's business). */
  buffer?: BatchBuffer<T>;
  /**
   * Consecutive failures of one batch before it is dropped (so one bad row cannot stop the writer);
   * Infinity keeps every row its buffer has room for until the database answers.
   */
  maxAttempts?: number;
  /** Awaited between two statements of one flush (PGlite: betweenStatements, a turn of the event loop). */
  betweenBatches?: () => Promise<void> | undefined;
  onDropped?: (rows: number, reason: 'overflow' | 'failed') => void;
  onError?: (error: unknown, rows: number) => void;
}

/** The default buffer: rows in arrival order, at most `maxPending` of them. */
class BoundedQueue<T> implements BatchBuffer<T> {
  rows: T[] = [];

  constructor(
    private readonly maxPending: number,
    private readonly onDropped: BatchWriterOptions<T>['onDropped'],
  ) {}

  get size(): number {
    return this.rows.length;
  }

  add(rows: T[]): number {
    const room = Math.max(0, this.maxPending - this.rows.length);
    const accepted = rows.length <= room ? rows : rows.slice(0, room);
    if (accepted.length < rows.length) this.onDropped?.(rows.length - accepted.length, 'overflow');
    for (const row of accepted) this.rows.push(row);
    return accepted.length;
  }

  drain(max: number): T[] {
    return this.rows.splice(0, max);
  }

  putBack(rows: T[]): void {
    const room = Math.max(0, this.maxPending - this.rows.length);
    const kept = rows.slice(0, room);
    if (kept.length < rows.length) this.onDropped?.(rows.length - kept.length, 'overflow');
    this.rows = [...kept, ...this.rows];
  }
}

/**
 * Buffers rows from many sources (agent connections, API requests, proxied requests) and writes them in
 * large batches, one flush at a time: thousands of hosts or requests sending a few rows each become a
 * few statements a second. Bounded: when the database falls behind, the rows already buffered stay and
 * new ones are dropped and counted. The one timing of every background writer: a flush
 * flushIntervalMs after the first waiting row, at once for a full buffer, on demand, and at stop.
 */
export class BatchWriter<T> {
  readonly #o: BatchWriterOptions<T> & { maxAttempts: number; flushAt: number };
  readonly #buffer: BatchBuffer<T>;
  readonly #queue: BoundedQueue<T> | null = null;
  /** The run under way; resolves to the error of the batch that failed, or null. */
  #running: Promise<unknown> | null = null;
  #followUp: Promise<unknown> | null = null;
  /** Set while rows wait for their flush; none while the buffer is empty (an idle writer never wakes). */
  #timer: NodeJS.Timeout | null = null;
  #started = false;
  #failures = 0;

  constructor(options: BatchWriterOptions<T>) {
    this.#o = { maxAttempts: 3, flushAt: options.maxBatch, ...options };
    if (options.buffer) {
      this.#buffer = options.buffer;
    } else {
      if (options.maxPending === undefined) throw new Error('BatchWriter needs maxPending or a buffer');
      this.#queue = new BoundedQueue(options.maxPending, options.onDropped);
      this.#buffer = this.#queue;
    }
  }

  get pending(): number {
    return this.#buffer.size;
  }

  /** Queues rows on the default queue; returns how many were accepted. A full batch starts a write at once. */
  add(rows: T[]): number {
    if (!this.#queue)
      throw new Error('BatchWriter.add is for the default queue: fill the buffer, then queued()');
    const accepted = this.#queue.add(rows);
    this.queued();
    return accepted;
  }

  /** Rows were added to the owner's buffer: a full one is written at once, else within flushIntervalMs. */
  queued(): void {
    if (this.#buffer.size >= this.#o.flushAt) void this.flush();
    else this.#arm();
  }

  /** Writes everything queued so far (and whatever arrives meanwhile); never rejects (onError hears). */
  async flush(): Promise<void> {
    await this.#run();
  }

  /** As flush, but rejects with the error of a batch that failed (its rows are kept, as after flush). */
  async flushOrThrow(): Promise<void> {
    const error = await this.#run();
    if (error) throw error;
  }

  #run(): Promise<unknown> {
    if (this.#running) {
      // One follow-up run, shared by every caller that arrives while a run is under way.
      this.#followUp ??= this.#running.then(() => {
        this.#followUp = null;
        return this.#run();
      });
      return this.#followUp;
    }
    if (this.#buffer.size === 0) return Promise.resolve(null);
    this.#running = this.#drain().finally(() => {
      this.#running = null;
      // Rows that came meanwhile, or a failed batch back at the front, get their own wait.
      this.#arm();
    });
    return this.#running;
  }

  async #drain(): Promise<unknown> {
    let statements = 0;
    while (this.#buffer.size > 0) {
      const rows = this.#buffer.drain(this.#o.maxBatch);
      for (let i = 0; i < rows.length; i += this.#o.maxBatch) {
        const batch = rows.slice(i, i + this.#o.maxBatch);
        try {
          if (statements++ > 0) await this.#o.betweenBatches?.();
          await this.#o.write(batch);
          this.#failures = 0;
        } catch (error) {
          this.#failures += 1;
          this.#o.onError?.(error, batch.length);
          const unwritten = rows.slice(i);
          if (this.#failures >= this.#o.maxAttempts) {
            this.#failures = 0;
            this.#o.onDropped?.(batch.length, 'failed');
            unwritten.splice(0, batch.length);
          }
          // Back to the front, and wait a flush interval rather than hammering a failing database.
          if (unwritten.length > 0) this.#buffer.putBack(unwritten);
          return error;
        }
      }
    }
    return null;
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
    if (!this.#started || this.#timer || this.#buffer.size === 0) return;
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
    if (this.#buffer.size > 0) await this.flush();
  }
}

import { type BatchBuffer, BatchWriter } from '../fleet/telemetry/batch-writer.ts';
import type { Logger } from '../logger.ts';
import { Intervals } from '../util/intervals.ts';

export interface RetainedTableOptions<T> {
  /** The owner's buffer, summing what it is given; `dropped` counts what it had no room for. */
  buffer: BatchBuffer<T> & { readonly dropped: number };
  /** One batch in one statement. */
  write: (rows: T[]) => Promise<void>;
  flushIntervalMs: number;
  maxBatch: number;
  betweenBatches?: () => Promise<void> | undefined;
  /** Deletes rows past retention. */
  purge: () => Promise<number>;
  purgeIntervalMs: number;
  logger: Logger;
  /** The warnings of a failed write and of a failed purge. */
  messages: { write: string; purge: string };
}

/**
 * The life of a table that counters of live traffic fill and retention empties (the API request log,
 * the proxy's traffic): a BatchWriter that only its timer, readers (flush) and stop drive, keeping every
 * row its buffer has room for until the database answers, beside a timer purging what retention let
 * go. A failed write or purge is logged and tried again on the next round.
 */
export class RetainedTable<T> extends BatchWriter<T> {
  readonly #intervals = new Intervals();
  readonly #purge: Pick<RetainedTableOptions<T>, 'purge' | 'purgeIntervalMs' | 'logger' | 'messages'>;

  constructor(options: RetainedTableOptions<T>) {
    const { buffer, logger, messages } = options;
    super({
      buffer,
      write: options.write,
      flushIntervalMs: options.flushIntervalMs,
      maxBatch: options.maxBatch,
      // The buffer sums rows, so it stays small whatever the rate: only the timer (and readers) write.
      flushAt: Number.POSITIVE_INFINITY,
      maxAttempts: Number.POSITIVE_INFINITY,
      betweenBatches: options.betweenBatches,
      onError: (error) =>
        logger.warn({ err: error, buffered: buffer.size, dropped: buffer.dropped }, messages.write),
    });
    this.#purge = options;
  }

  override start(): void {
    super.start();
    const { purge, purgeIntervalMs, logger, messages } = this.#purge;
    this.#intervals.every(purgeIntervalMs, () =>
      purge().catch((error) => logger.warn({ err: error }, messages.purge)),
    );
  }

  /** Stops the timers and writes what is still buffered. */
  override async stop(): Promise<void> {
    this.#intervals.clear();
    await super.stop();
  }
}

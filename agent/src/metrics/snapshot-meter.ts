import type { SnapshotImageUsage } from '@anvil/shared/protocol';
import type { Clock } from '../clock.ts';

export interface SnapshotMeterOptions {
  list: () => Promise<SnapshotImageUsage[]>;
  clock: Clock;
  /** Listings at most this often: images change only when a snapshot is taken or deleted. */
  everyMs: number;
}

/** Lists the host's snapshot images for storage metering, at most once per `everyMs`. */
export class SnapshotMeter {
  readonly #o: SnapshotMeterOptions;
  #lastAt: number | null = null;

  constructor(options: SnapshotMeterOptions) {
    this.#o = options;
  }

  /** A fresh listing when one is due, else null (the sample carries none). A failed listing is retried next time. */
  async due(): Promise<SnapshotImageUsage[] | null> {
    const now = this.#o.clock.now();
    if (this.#lastAt !== null && now - this.#lastAt < this.#o.everyMs) return null;
    const listing = await this.#o.list();
    this.#lastAt = now;
    return listing;
  }
}

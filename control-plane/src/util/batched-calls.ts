/**
 * Gathers single calls into batches: a call while no batch runs starts one at once (no added latency
 * when calls are rare); calls that arrive while a batch runs wait and go together in the next one. Under
 * a burst (thousands of agents redialling after a restart) N one-row statements become N / maxBatch
 * statements. One batch at a time; `between` runs after each (PGlite: let the event loop turn).
 */
export class BatchedCalls<I, O> {
  readonly #pending: { item: I; resolve: (out: O) => void; reject: (error: unknown) => void }[] = [];
  #running = false;

  constructor(
    /** Answers each item, in order; throwing rejects every call of the batch. */
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly maxBatch: number,
    private readonly between: () => Promise<void> | undefined = () => undefined,
  ) {}

  call(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#pending.push({ item, resolve, reject });
      if (!this.#running) void this.#drain();
    });
  }

  async #drain(): Promise<void> {
    this.#running = true;
    try {
      while (this.#pending.length > 0) {
        const batch = this.#pending.splice(0, this.maxBatch);
        try {
          const out = await this.run(batch.map((b) => b.item));
          for (const [i, b] of batch.entries()) b.resolve(out[i] as O);
        } catch (error) {
          for (const b of batch) b.reject(error);
        }
        await this.between();
      }
    } finally {
      this.#running = false;
    }
  }
}

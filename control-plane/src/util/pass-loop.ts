/**
 * Runs a supervisor's passes one at a time, never two at once: the first at start(), then each after
 * the delay the last one's result asks for, or after `kickedMs` when kick() came meanwhile (a kick
 * while idle starts a pass at once). A failed pass is reported, and the next follows after `failedMs`
 * (or `kickedMs` when kicked). The timer never holds the process open; stop() waits for the pass under
 * way. The state every pass works from lives in the database, so nothing is lost between passes.
 */
export class PassLoop<T> {
  #timer: NodeJS.Timeout | null = null;
  #running = false;
  #passing: Promise<void> | null = null;
  #kicked = true;
  #wakeAt = Number.POSITIVE_INFINITY;
  /** Passes begun so far (tests count them). */
  passes = 0;

  constructor(
    private readonly o: {
      /** One pass; `kicked`: whether kick() (or start) came since the last pass began. */
      run: (kicked: boolean) => Promise<T>;
      /** The delay before the next pass, from this one's result. */
      after: (result: T) => number;
      failedMs: number;
      onError: (error: unknown) => void;
      kickedMs?: number;
    },
  ) {}

  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#schedule(0);
  }

  async stop(): Promise<void> {
    this.#running = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#wakeAt = Number.POSITIVE_INFINITY;
    await this.#passing;
  }

  /** Something changed: a pass soon (now, when none is under way). */
  kick(): void {
    this.#kicked = true;
    if (this.#running && !this.#passing) this.#schedule(0);
  }

  /** When the next pass begins (epoch ms); Infinity while a pass runs or when stopped. */
  get wakeAt(): number {
    return this.#wakeAt;
  }

  #schedule(ms: number): void {
    if (!this.#running) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#wakeAt = Date.now() + ms;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#wakeAt = Number.POSITIVE_INFINITY;
      this.passes += 1;
      const next = (otherwise: number) => this.#schedule(this.#kicked ? (this.o.kickedMs ?? 0) : otherwise);
      // Taken as the pass begins: a kick during the pass brings the next one forward.
      const kicked = this.#kicked;
      this.#kicked = false;
      this.#passing = this.o
        .run(kicked)
        .then(
          (result) => next(this.o.after(result)),
          (error: unknown) => {
            this.o.onError(error);
            next(this.o.failedMs);
          },
        )
        .finally(() => {
          this.#passing = null;
        });
    }, ms);
    this.#timer.unref();
  }
}

/**
 * Runs a background pass when its work falls due, not on a fixed period: each pass says how long until
 * the next thing is due (read from the data: a lease end, a retry time), and the loop sleeps until then,
 * or until wake() (something changed: an in-process event, a NOTIFY from another replica). Passes never
 * overlap, and stay at least `minGapMs` apart however often the loop is woken, so a busy system costs no
 * more than a fixed period of that length did. `sweepMs` caps every sleep: a safety pass for changes no
 * event announced. With nothing due and nothing announced, nothing runs but that sweep.
 */
export class DueLoop {
  #timer: NodeJS.Timeout | null = null;
  /** When the timer fires (epoch ms), Infinity when none is set. */
  #wakeAt = Number.POSITIVE_INFINITY;
  #running: Promise<void> | null = null;
  #started = false;
  #wokenDuringPass = false;
  #lastPass = Number.NEGATIVE_INFINITY;
  /** Passes run so far (tests count them). */
  passes = 0;

  constructor(
    private readonly o: {
      /** One pass; resolves to the milliseconds until its next work falls due (Infinity: none known). */
      run: () => Promise<number>;
      onError: (error: unknown) => void;
      minGapMs: number;
      sweepMs: number;
    },
  ) {}

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#at(Date.now());
  }

  async stop(): Promise<void> {
    this.#started = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#wakeAt = Number.POSITIVE_INFINITY;
    await this.#running;
  }

  /** Something changed: a pass soon (at once, unless the last one began less than minGapMs ago). */
  wake(): void {
    if (!this.#started) return;
    if (this.#running) {
      this.#wokenDuringPass = true;
      return;
    }
    this.#at(Math.max(Date.now(), this.#lastPass + this.o.minGapMs));
  }

  /** When the next pass is due (epoch ms), Infinity when none is set (stopped, or a pass under way). */
  get wakeAt(): number {
    return this.#wakeAt;
  }

  /** Sets the timer for `at` unless it fires sooner already. */
  #at(at: number): void {
    if (!this.#started || at >= this.#wakeAt) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#wakeAt = at;
    this.#timer = setTimeout(() => this.#pass(), Math.max(0, at - Date.now()));
    // Background work never keeps the process up on its own.
    this.#timer.unref();
  }

  #pass(): void {
    this.#timer = null;
    this.#wakeAt = Number.POSITIVE_INFINITY;
    this.#lastPass = Date.now();
    this.#wokenDuringPass = false;
    this.passes += 1;
    this.#running = this.o
      .run()
      .catch((error: unknown) => {
        this.o.onError(error);
        return this.o.minGapMs;
      })
      .then((dueInMs) => {
        this.#running = null;
        const next = this.#wokenDuringPass ? 0 : Math.min(Math.max(0, dueInMs), this.o.sweepMs);
        this.#at(Math.max(Date.now() + next, this.#lastPass + this.o.minGapMs));
      });
  }
}

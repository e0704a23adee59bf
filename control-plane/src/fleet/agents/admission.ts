/** How far back welcomes count toward the rate at which hellos are being served. */
const RATE_WINDOW_MS = 3_000;
/** The longest wait an agent is told; it then redials and is told again if still too early. */
export const MAX_RETRY_AFTER_SECONDS = 30;

/**
 * Admission of agent sockets before their hello. At most `limit` sockets wait for a welcome at once:
 * each is an unauthenticated stranger, and each hello in progress holds database work, so a whole fleet
 * redialling after a restart is served at a bounded concurrency instead of all at once. A socket past
 * the limit is answered 503 with a Retry-After that gives it its own future slot: slots follow one
 * another at the rate hellos are being welcomed (measured over the last seconds, and at least `limit` a
 * second), so the agents turned away together come back spread out at about the pace they can
 * be served, rather than all in the next instant or, by their exponential backoff, a minute later.
 */
export class HelloAdmission {
  readonly #welcomes: number[] = [];
  #nextSlotMs = 0;

  constructor(
    readonly limit: number,
    private readonly nowMs: () => number = () => performance.now(),
  ) {}

  /** A hello was welcomed: counts toward the rate. */
  welcomed(): void {
    const now = this.nowMs();
    this.#welcomes.push(now);
    this.#trim(now);
  }

  /** With `waiting` sockets before their welcome: null to admit one more, else the seconds it should wait. */
  retryAfter(waiting: number): number | null {
    if (waiting < this.limit) return null;
    const now = this.nowMs();
    this.#trim(now);
    // Optimistic: at least the limit a second (each hello done within a second). Too early costs the agent
    // one more cheap 503; too late costs the whole fleet time.
    const spanSeconds = Math.max(1, (now - (this.#welcomes[0] ?? now)) / 1000);
    const perSecond = Math.max(this.limit, this.#welcomes.length / spanSeconds);
    // The earliest slot is a second away: sooner, the sockets admitted now still hold every place.
    const from = Math.max(now + 1_000, Math.min(this.#nextSlotMs, now + MAX_RETRY_AFTER_SECONDS * 1000));
    this.#nextSlotMs = from + 1_000 / perSecond;
    return Math.min(MAX_RETRY_AFTER_SECONDS, Math.ceil((from - now) / 1000));
  }

  #trim(now: number): void {
    let drop = 0;
    while (drop < this.#welcomes.length && this.#welcomes[drop]! < now - RATE_WINDOW_MS) drop++;
    if (drop > 0) this.#welcomes.splice(0, drop);
  }
}

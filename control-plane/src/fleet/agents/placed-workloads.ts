/** How long a workload that left the host's desired set may still report (its last log lines on stop). */
export const PLACED_GRACE_MS = 10 * 60_000;

/**
 * The workloads placed on one connection's host, from the desired sets this connection pushed (refreshed
 * with every push, so no query per message): logs, metrics and log losses of any other workload id are
 * dropped. A host's credential is one host's: it must not write into another tenant's workload (training
 * reports are read from logs, so they are covered too). A workload that leaves the set may still report
 * for PLACED_GRACE_MS, so the lines a stopping container prints are kept.
 */
export class PlacedWorkloads {
  /** Workload id -> until when it may report (Infinity while in the desired set). */
  readonly #until = new Map<string, number>();
  #loaded = false;
  readonly #ready: Promise<void>;
  #resolveReady!: () => void;

  constructor(private readonly graceMs = PLACED_GRACE_MS) {
    this.#ready = new Promise((resolve) => {
      this.#resolveReady = resolve;
    });
  }

  /** Resolves once a first desired set (or the failure to read one) is known. */
  get ready(): Promise<void> {
    return this.#ready;
  }

  /** The host's desired set as just read: its ids report freely, the others for the grace from now. */
  refresh(ids: Iterable<string>, nowMs: number): void {
    const current = new Set(ids);
    for (const [id, until] of this.#until) {
      if (current.has(id)) continue;
      if (until === Number.POSITIVE_INFINITY) this.#until.set(id, nowMs + this.graceMs);
      else if (until <= nowMs) this.#until.delete(id);
    }
    for (const id of current) this.#until.set(id, Number.POSITIVE_INFINITY);
    this.loaded();
  }

  /** No set could be read: stop waiting (nothing is placed as far as this connection knows). */
  loaded(): void {
    if (this.#loaded) return;
    this.#loaded = true;
    this.#resolveReady();
  }

  has(id: string, nowMs: number): boolean {
    const until = this.#until.get(id);
    return until !== undefined && nowMs < until;
  }
}

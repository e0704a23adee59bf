/**
 * "This changed: act on it", created before both sides it connects. A service that changes rows (a
 * cluster created, a job stopped) calls `notify()`; the supervisor loop that acts on those rows is built
 * after the service (it calls the service) and listens. Handing the one object to both at construction
 * breaks that construction cycle without a setter. Listeners run synchronously, in the order they were
 * added, and must not throw (a kick of a pass loop, a flag set).
 */
export class Signal<T = void> {
  readonly #listeners = new Set<(value: T) => void>();

  notify(value: T): void {
    for (const listener of this.#listeners) listener(value);
  }

  /** Returns the unsubscribe. */
  listen(listener: (value: T) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}

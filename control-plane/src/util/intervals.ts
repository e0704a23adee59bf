/**
 * Repeating background timers of one component, started together and cleared together. They are
 * unref'd: a pending flush or purge never keeps the process alive on its own (stop() flushes instead).
 */
export class Intervals {
  #timers: NodeJS.Timeout[] = [];

  every(ms: number, run: () => unknown): void {
    const timer = setInterval(() => void run(), ms);
    timer.unref();
    this.#timers.push(timer);
  }

  clear(): void {
    for (const timer of this.#timers) clearInterval(timer);
    this.#timers = [];
  }
}

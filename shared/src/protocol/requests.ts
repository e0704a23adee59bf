/**
 * Pairs requests with their answers by id, with a time-out, on either side of the connection:
 * the agent waits for welcome/registered/heartbeat_ack, the control plane for replies to commands.
 */

/** Message types that answer another message and carry its id. */
export const ANSWER_TYPES: ReadonlySet<string> = new Set([
  'registered',
  'welcome',
  'refusal',
  'heartbeat_ack',
  'reply',
  'credential_renewed',
]);

export class RequestTimeoutError extends Error {
  constructor(
    readonly requestType: string,
    readonly requestId: string,
    readonly timeoutMs: number,
  ) {
    super(`${requestType} ${requestId}: no answer within ${timeoutMs} ms`);
    this.name = 'RequestTimeoutError';
  }
}

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

interface Waiter<A> {
  resolve(answer: A): void;
  reject(err: Error): void;
  timer: unknown;
}

export class PendingRequests<A extends { id: string }> {
  readonly #waiters = new Map<string, Waiter<A>>();
  readonly #timers: Timers;

  constructor(timers: Timers = realTimers) {
    this.#timers = timers;
  }

  get size(): number {
    return this.#waiters.size;
  }

  /**
   * Register the request, then send it; resolves with the answer carrying its id, rejects with
   * RequestTimeoutError, with the error `send` throws, or with the reason given to rejectAll.
   */
  request<R extends { id: string; type: string }>(
    message: R,
    send: (message: R) => void,
    timeoutMs: number,
  ): Promise<A> {
    const answer = new Promise<A>((resolve, reject) => {
      const timer = this.#timers.setTimeout(() => {
        this.#waiters.delete(message.id);
        reject(new RequestTimeoutError(message.type, message.id, timeoutMs));
      }, timeoutMs);
      this.#waiters.set(message.id, { resolve, reject, timer });
    });
    try {
      send(message);
    } catch (err) {
      this.#drop(message.id)?.reject(err as Error);
    }
    return answer;
  }

  /** Hand an incoming answer to its waiter; false when nobody waits for this id (late or unsolicited). */
  settle(answer: A): boolean {
    const waiter = this.#drop(answer.id);
    if (!waiter) return false;
    waiter.resolve(answer);
    return true;
  }

  /** The connection is gone: every waiter learns why at once instead of waiting for its time-out. */
  rejectAll(reason: Error): void {
    for (const id of [...this.#waiters.keys()]) this.#drop(id)?.reject(reason);
  }

  #drop(id: string): Waiter<A> | undefined {
    const waiter = this.#waiters.get(id);
    if (!waiter) return undefined;
    this.#waiters.delete(id);
    this.#timers.clearTimeout(waiter.timer);
    return waiter;
  }
}

import type { EndpointJob } from '../db/generated/client.ts';
import type { Dispatcher } from './dispatcher.ts';

/** What a job's end brought: its final row (ended on this replica), or `true` (read it: ended elsewhere). */
export type JobEnd = EndpointJob | true;

/**
 * Listens for job ends on behalf of one waiter (runsync, status-sync), from before it knows its job: a
 * runsync subscribes before queueing, so an end that comes while the job is being queued (a fast worker)
 * is kept rather than missed. Ends heard before follow() are held until then, and only that job's kept.
 */
export class EndWatch {
  #jobId: string | null = null;
  #early = new Map<string, JobEnd>();
  #end: JobEnd | null = null;
  #wake: (() => void) | null = null;
  readonly #unsubscribe: () => void;

  constructor(dispatcher: Pick<Dispatcher, 'onFinished'>, endpointId: string) {
    this.#unsubscribe = dispatcher.onFinished((id, row) => {
      const end: JobEnd = row && row.endpointId === endpointId ? row : true;
      if (this.#jobId === null) {
        this.#early.set(id, end);
        return;
      }
      if (id !== this.#jobId) return;
      this.#end = end;
      this.#wake?.();
    });
  }

  /** From now on, only `jobId`'s end counts (one heard already included). */
  follow(jobId: string): void {
    this.#jobId = jobId;
    this.#end = this.#early.get(jobId) ?? this.#end;
    this.#early.clear();
  }

  /** The end heard since the last take, if any. */
  take(): JobEnd | null {
    const end = this.#end;
    this.#end = null;
    return end;
  }

  /** Resolves when the job's end comes, or after `ms`; at once if one came and was not taken. */
  async sleep(ms: number): Promise<void> {
    if (this.#end !== null) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.#wake = null;
  }

  close(): void {
    this.#unsubscribe();
    this.#early.clear();
  }
}

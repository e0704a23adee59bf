import type { Logger } from 'pino';
import type { ContainerRuntime } from '../docker/runtime.ts';
import { errorMessage } from '../errors.ts';
import type { RunningContainer } from '../reconcile/reconciler.ts';
import type { LogBuffer } from './buffer.ts';
import type { LogCursors } from './cursors.ts';
import { followContainer, type StreamCursor } from './follower.ts';

/**
 * Keeps one follower per running Anvil container. Followers end on their own when a container
 * stops (the buffer then announces the container's end after its last line); the next sync after it
 * starts again resumes from the last line read, so nothing is read twice or skipped.
 */
export class LogManager {
  readonly #followers = new Map<string, AbortController>();
  /** Last line read per container in this process (ahead of the sent cursor while lines wait). */
  readonly #read = new Map<string, StreamCursor>();
  #stopped = false;

  constructor(
    private readonly options: {
      runtime: ContainerRuntime;
      buffer: LogBuffer;
      cursors: LogCursors;
      logger: Logger;
      now: () => number;
    },
  ) {}

  get following(): string[] {
    return [...this.#followers.keys()];
  }

  /** Start following containers that run and are not followed yet. */
  sync(running: RunningContainer[]): void {
    if (this.#stopped) return;
    for (const { containerId, workloadId } of running) {
      if (this.#followers.has(containerId)) continue;
      const abort = new AbortController();
      this.#followers.set(containerId, abort);
      const after = this.#read.get(containerId) ?? this.options.cursors.get(containerId);
      followContainer({
        runtime: this.options.runtime,
        containerId,
        workloadId,
        after,
        now: this.options.now,
        signal: abort.signal,
        onEntry: (entry) => {
          const cursor = this.#read.get(containerId) ?? { stdout: null, stderr: null };
          cursor[entry.stream] = entry.ts;
          this.#read.set(containerId, cursor);
          this.options.buffer.push(entry);
        },
      })
        .then(() => this.#ended(containerId, workloadId, abort.signal))
        .catch((err: unknown) => {
          this.options.logger.warn({ containerId, err: errorMessage(err) }, 'log follower stopped');
        })
        .finally(() => {
          if (this.#followers.get(containerId) === abort) this.#followers.delete(containerId);
        });
    }
  }

  /**
   * A follower that ended on its own read the container's logs to the end if the container has stopped
   * (or is gone): its last lines are in the buffer, and the buffer announces the end once they are sent.
   * A stream Docker ended while the container still runs is followed again at the next sync instead.
   */
  async #ended(containerId: string, workloadId: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return;
    const details = await this.options.runtime.inspect(containerId);
    if (details?.State?.Running) return;
    this.options.buffer.end(workloadId, containerId);
  }

  /** Forget read positions of containers that no longer exist. */
  retain(existing: ReadonlySet<string>): void {
    for (const id of [...this.#read.keys()]) if (!existing.has(id)) this.#read.delete(id);
    this.options.cursors.retain(existing);
  }

  stop(): void {
    this.#stopped = true;
    for (const abort of this.#followers.values()) abort.abort();
    this.#followers.clear();
  }
}

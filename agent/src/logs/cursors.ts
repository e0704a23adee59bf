import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import { errorMessage } from '../errors.ts';
import type { StreamCursor } from './follower.ts';

/**
 * The timestamps of the last log lines sent per container and stream, kept in the state directory so a
 * restarted agent resumes where it stopped: lines written while it was down are sent, lines
 * already sent are not sent again.
 */
export class LogCursors {
  readonly #path: string;
  readonly #logger: Logger;
  #sent = new Map<string, StreamCursor>();
  #dirty = false;
  #writing: Promise<void> | null = null;

  private constructor(path: string, logger: Logger) {
    this.#path = path;
    this.#logger = logger;
  }

  static async open(stateDir: string, logger: Logger): Promise<LogCursors> {
    const cursors = new LogCursors(join(stateDir, 'log-cursors.json'), logger);
    try {
      const parsed = JSON.parse(await readFile(cursors.#path, 'utf8')) as unknown;
      if (parsed && typeof parsed === 'object') {
        for (const [id, value] of Object.entries(parsed as Record<string, Partial<StreamCursor>>)) {
          const text = (v: unknown) => (typeof v === 'string' ? v : null);
          cursors.#sent.set(id, { stdout: text(value?.stdout), stderr: text(value?.stderr) });
        }
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        logger.warn({ err: errorMessage(err), path: cursors.#path }, 'log cursors unreadable; starting over');
      }
    }
    return cursors;
  }

  get(containerId: string): StreamCursor {
    return { ...(this.#sent.get(containerId) ?? { stdout: null, stderr: null }) };
  }

  advance(containerId: string, stream: 'stdout' | 'stderr', ts: string): void {
    const cursor = this.#sent.get(containerId) ?? { stdout: null, stderr: null };
    const current = cursor[stream];
    if (current !== null && current >= ts) return;
    cursor[stream] = ts;
    this.#sent.set(containerId, cursor);
    this.#dirty = true;
  }

  /** Forget containers that no longer exist, so the file does not grow forever. */
  retain(containerIds: ReadonlySet<string>): void {
    for (const id of [...this.#sent.keys()]) {
      if (!containerIds.has(id)) {
        this.#sent.delete(id);
        this.#dirty = true;
      }
    }
  }

  /** Write if anything changed; atomic (write + rename). Called on a timer, not per line. */
  async flush(): Promise<void> {
    if (this.#writing) await this.#writing;
    if (!this.#dirty) return;
    this.#dirty = false;
    const text = JSON.stringify(Object.fromEntries(this.#sent));
    this.#writing = (async () => {
      try {
        await mkdir(dirname(this.#path), { recursive: true, mode: 0o700 });
        const tmp = `${this.#path}.tmp`;
        await writeFile(tmp, text, { mode: 0o600 });
        await rename(tmp, this.#path);
      } catch (err) {
        this.#dirty = true;
        this.#logger.warn({ err: errorMessage(err) }, 'could not save log cursors');
      }
    })();
    await this.#writing;
    this.#writing = null;
  }
}

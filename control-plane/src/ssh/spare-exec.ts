import type { ExecSession } from '../fleet/tunnels/types.ts';
import type { ExecOpener } from './container-shell.ts';
import { encodeRequest, SPARE_SCRIPT } from './shell-protocol.ts';

/** After its stdin ended, how long an unused spare may take to exit before it is killed. */
const CLOSE_GRACE_MS = 5_000;

interface Spare {
  session: ExecSession;
  /** It exited (or its tunnel went) before it was used. */
  gone: boolean;
}

/**
 * Keeps one exec started ahead of need (SPARE_SCRIPT: a shell waiting for the script to become), so
 * opening a file to stream costs a line on a pipe instead of a `docker exec` on the critical path of an
 * SFTP OPEN. Taking the spare starts the next one. When no spare can be had (it failed to start, or
 * died), the process is opened as an exec of its own, as without spares.
 */
export class SpareExec {
  #next: Promise<Spare | null> | null = null;
  #closed = false;

  constructor(private readonly open: ExecOpener) {
    this.#next = this.#launch();
  }

  /** A process running `sh -c script sh args...`, its streams the caller's as with ContainerExec.open. */
  async start(script: string, args: string[]): Promise<ExecSession> {
    // Encoded first: an argument that cannot be sent must not use up the spare.
    const line = encodeRequest(script, args);
    const next = this.#next;
    this.#next = this.#closed ? null : this.#launch();
    const spare = next ? await next : null;
    if (!spare || spare.gone) return this.open(script, args);
    spare.session.stdin.write(line);
    return spare.session;
  }

  /** Ends the waiting spare (its stdin ends: it exits without running anything); no new one starts. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const next = this.#next;
    this.#next = null;
    void next?.then((spare) => {
      if (!spare || spare.gone) return;
      spare.session.stdin.end();
      const timer = setTimeout(() => spare.session.close(), CLOSE_GRACE_MS);
      timer.unref();
      void spare.session.exit.then(() => clearTimeout(timer));
    });
  }

  #launch(): Promise<Spare | null> {
    return this.open(SPARE_SCRIPT, []).then(
      (session) => {
        const spare: Spare = { session, gone: false };
        void session.exit.then(() => {
          spare.gone = true;
        });
        return spare;
      },
      () => null,
    );
  }
}

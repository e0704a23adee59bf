import type { ExecSession } from '../fleet/tunnels/types.ts';
import type { ExecResult } from './exec-result.ts';
import { encodeRequest, HELPER_SCRIPT, ReplyReader, type ShellReply } from './shell-protocol.ts';

/** After its stdin ended, how long the helper may take to finish what it was asked before it is killed. */
const CLOSE_GRACE_MS = 10_000;

interface Request {
  script: string;
  args: string[];
  resolve(result: ExecResult): void;
  reject(error: Error): void;
}

/** Starts a process in the container (ContainerExec's own exec, not through this shell). */
export type ExecOpener = (script: string, args: string[]) => Promise<ExecSession>;
/** Runs a script as an exec of its own. */
export type ExecRunner = (script: string, args: string[]) => Promise<ExecResult>;

/**
 * One long-lived shell in the container that runs short scripts one after another (HELPER_SCRIPT):
 * a metadata operation then costs a line on its stdin and a reply, instead of a `docker exec` of its
 * own (about 20 ms to open and 100 ms more of Docker before its exit status is known). Requests are
 * written as they come and answered in the same order. Once the helper cannot serve (it never started,
 * died, or answered out of step), every request not yet answered, and every later one, runs as an exec
 * of its own: a request may then run twice (it had run when the helper died before answering), which
 * the scripts given here tolerate (a second rename or mkdir fails, it does not do harm).
 */
export class ContainerShell {
  #session: ExecSession | null = null;
  /** Sent, not yet answered, in order; and those waiting for the helper to start. */
  #waiting: Request[] = [];
  #failed = false;
  #closed = false;
  /** Lines of requests made before the helper's exec was open. */
  #unsent: Buffer[] = [];

  constructor(
    open: ExecOpener,
    private readonly fallback: ExecRunner,
  ) {
    open(HELPER_SCRIPT, []).then(
      (session) => this.#attach(session),
      () => this.#fail(),
    );
  }

  /** Runs `sh -c script sh args...` in the helper (a subshell of it, stdin empty); its status and output. */
  run(script: string, args: string[]): Promise<ExecResult> {
    if (this.#closed) return Promise.reject(new Error('the session ended'));
    if (this.#failed) return this.fallback(script, args);
    // Encoded first: an argument that cannot be sent fails alone, not the requests behind it.
    let line: Buffer;
    try {
      line = encodeRequest(script, args);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      this.#waiting.push({ script, args, resolve, reject });
      if (this.#session) this.#session.stdin.write(line);
      else this.#unsent.push(line);
    });
  }

  /** Lets the helper finish what it was asked and exit (its stdin ends); killed if it takes too long. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#session) this.#finish(this.#session);
  }

  #finish(session: ExecSession): void {
    session.stdin.end();
    const timer = setTimeout(() => session.close(), CLOSE_GRACE_MS);
    timer.unref();
    void session.exit.then(() => clearTimeout(timer));
  }

  #attach(session: ExecSession): void {
    if (this.#failed) {
      session.close();
      return;
    }
    this.#session = session;
    const reader = new ReplyReader();
    session.stdout.on('data', (chunk: Buffer) => {
      let replies: ShellReply[];
      try {
        replies = reader.push(chunk);
      } catch {
        return this.#fail();
      }
      for (const reply of replies) {
        const request = this.#waiting.shift();
        if (!request) return this.#fail();
        request.resolve({ code: reply.code, stdout: reply.stdout, stderr: reply.stderr.toString('utf8') });
      }
    });
    // Its stderr carries nothing for us, but must not fill up and stall it.
    session.stderr.resume();
    session.stdout.once('end', () => this.#fail());
    session.stdout.once('close', () => this.#fail());
    session.stdout.once('error', () => this.#fail());
    for (const line of this.#unsent.splice(0)) session.stdin.write(line);
    // Closed while it was starting: what was asked is still answered, then it exits.
    if (this.#closed) this.#finish(session);
  }

  /** The helper cannot serve: whatever it has not answered runs as execs of their own. */
  #fail(): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#unsent = [];
    const session = this.#session;
    this.#session = null;
    if (session && !this.#closed) session.close();
    for (const request of this.#waiting.splice(0)) {
      if (this.#closed) request.reject(new Error('the session ended'));
      else this.fallback(request.script, request.args).then(request.resolve, request.reject);
    }
  }
}

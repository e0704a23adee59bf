import type { ExecSession, TunnelOpener } from '../fleet/tunnels/types.ts';
import { ContainerShell } from './container-shell.ts';
import type { ExecResult } from './exec-result.ts';
import { SpareExec } from './spare-exec.ts';

/**
 * Runs short commands in one container through the tunnels (each one a `docker exec` on its host):
 * SFTP is built from these, since images carry no sftp-server. A session that will run many of them
 * calls `prepare()` first: short commands then run in one helper shell (ContainerShell) and long-lived
 * ones start from a spare exec (SpareExec), so neither waits for an exec to open; `close()` ends both.
 */
export class ContainerExec {
  #shell: ContainerShell | null = null;
  #spare: SpareExec | null = null;

  constructor(
    private readonly tunnels: TunnelOpener,
    readonly workloadId: string,
  ) {}

  /** Starts the helper shell and a spare exec, in parallel with whatever the caller does next. */
  prepare(): void {
    if (this.#shell) return;
    const open = (script: string, args: string[]) => this.#open(script, args);
    this.#shell = new ContainerShell(open, (script, args) => this.#run(script, args));
    this.#spare = new SpareExec(open);
  }

  /** Ends the helper and the spare (they exit once their stdin ends); processes handed out are the caller's. */
  close(): void {
    this.#shell?.close();
    this.#spare?.close();
  }

  /** A long-lived process (a file being read or written): the caller owns its streams. */
  open(script: string, args: string[]): Promise<ExecSession> {
    return this.#spare ? this.#spare.start(script, args) : this.#open(script, args);
  }

  /** Runs `sh -c script sh args...` to completion (stdin empty, or `stdin`) and collects its output. */
  run(script: string, args: string[] = [], stdin?: Buffer): Promise<ExecResult> {
    return this.#shell && stdin === undefined
      ? this.#shell.run(script, args)
      : this.#run(script, args, stdin);
  }

  #open(script: string, args: string[]): Promise<ExecSession> {
    return this.tunnels.openExec(this.workloadId, {
      command: ['/bin/sh', '-c', script, 'sh', ...args],
      tty: false,
    });
  }

  async #run(script: string, args: string[], stdin?: Buffer): Promise<ExecResult> {
    const exec = await this.#open(script, args);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    exec.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    exec.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    const ended = Promise.all([finished(exec.stdout), finished(exec.stderr)]);
    exec.stdin.end(stdin);
    const { code } = await exec.exit;
    await ended;
    return { code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') };
  }
}

/** Settles when a readable ended or failed (either way nothing more comes). */
export function finished(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise((resolve) => {
    const readable = stream as NodeJS.ReadableStream & { readableEnded?: boolean; destroyed?: boolean };
    if (readable.readableEnded || readable.destroyed) return resolve();
    stream.once('end', () => resolve());
    stream.once('close', () => resolve());
    stream.once('error', () => resolve());
  });
}

import type { ExecSession, TunnelOpener } from '../tunnels/types.ts';

export interface ExecResult {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

/**
 * Runs short commands in one container through the tunnels (each one a `docker exec` on its host):
 * SFTP is built from these, since images carry no sftp-server.
 */
export class ContainerExec {
  constructor(
    private readonly tunnels: TunnelOpener,
    readonly workloadId: string,
  ) {}

  /** A long-lived process (a file being read or written): the caller owns its streams. */
  open(script: string, args: string[]): Promise<ExecSession> {
    return this.tunnels.openExec(this.workloadId, {
      command: ['/bin/sh', '-c', script, 'sh', ...args],
      tty: false,
    });
  }

  /** Runs `sh -c script sh args...` to completion and collects its output. */
  async run(script: string, args: string[] = [], stdin?: Buffer): Promise<ExecResult> {
    const exec = await this.open(script, args);
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

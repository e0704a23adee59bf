import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONTROL_PLANE_NODE_FLAGS } from '../node-flags.ts';

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

export interface ControlPlaneProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code once the process has ended. */
  exited: Promise<number | null>;
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
}

/**
 * Runs the real control plane (`npm start`'s entry point) as a child process, with npm start's V8
 * flags unless `nodeFlags` says otherwise.
 */
export function spawnControlPlane(
  env: Record<string, string>,
  { nodeFlags = CONTROL_PLANE_NODE_FLAGS }: { nodeFlags?: readonly string[] } = {},
): ControlPlaneProcess {
  const entry = join(REPO_ROOT, 'control-plane/src/main.ts');
  const child = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', entry], {
    cwd: REPO_ROOT,
    // No local agent unless a test asks for one (ANVIL_LOCAL_AGENT=1).
    env: {
      PATH: process.env['PATH'] ?? '',
      HOME: process.env['HOME'] ?? '/tmp',
      LOG_LEVEL: 'info',
      ANVIL_LOCAL_AGENT: '0',
      // The HTTPS port proxy on a free port, so parallel test processes do not fight over 8443.
      ANVIL_PROXY_PORT: '0',
      ANVIL_SSH_PORT: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    for (const wake of waiters) wake();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    err += chunk.toString();
    for (const wake of waiters) wake();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitForOutput(pattern, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(out) ?? pattern.exec(err);
          if (match) {
            done();
            resolve(match);
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(
              `timed out waiting for ${pattern}; stdout: ${out.slice(-2000)} stderr: ${err.slice(-2000)}`,
            ),
          );
        }, timeoutMs);
        const onExit = () => {
          done();
          reject(new Error(`process exited while waiting for ${pattern}; stderr: ${err.slice(-2000)}`));
        };
        const done = () => {
          clearTimeout(timer);
          waiters.delete(check);
          child.off('exit', onExit);
        };
        waiters.add(check);
        child.once('exit', onExit);
        check();
      });
    },
  };
}

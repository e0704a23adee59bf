import { type ChildProcess, spawn } from 'node:child_process';
import { PassThrough, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { ExecSession } from '../fleet/tunnels/types.ts';
import { waitFor } from '../testing/wait.ts';
import { ContainerShell, type ExecOpener } from './container-shell.ts';
import type { ExecResult } from './exec-result.ts';
import { SpareExec } from './spare-exec.ts';

/**
 * The container stood in for by this machine's /bin/sh: each "exec" is a local process running the
 * real scripts, so the helper and spares are tested as they run, and the processes can be watched.
 */
function localExecs(options: { failOpens?: boolean } = {}) {
  const started: { script: string; child: ChildProcess }[] = [];
  const open: ExecOpener = async (script, args) => {
    if (options.failOpens) throw new Error('the agent is not connected');
    const child = spawn('/bin/sh', ['-c', script, 'sh', ...args], { stdio: 'pipe' });
    started.push({ script, child });
    const exit = new Promise<{ code: number | null }>((resolve) =>
      child.on('close', (code) => resolve({ code })),
    );
    const session: ExecSession = {
      stdin: child.stdin!,
      stdout: child.stdout!,
      stderr: child.stderr!,
      exit,
      resize() {},
      signal(name) {
        child.kill(`SIG${name}` as NodeJS.Signals);
      },
      close() {
        child.kill('SIGKILL');
      },
    };
    child.stdin!.on('error', () => {});
    return session;
  };
  const fallbacks: string[] = [];
  const run = async (script: string, args: string[]): Promise<ExecResult> => {
    fallbacks.push(script);
    const session = await open(script, args);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    session.stdout.on('data', (c: Buffer) => out.push(c));
    session.stderr.on('data', (c: Buffer) => err.push(c));
    session.stdin.end();
    const { code } = await session.exit;
    return { code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() };
  };
  const running = () => started.filter(({ child }) => child.exitCode === null && child.signalCode === null);
  return { open, run, started, fallbacks, running };
}

const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once('close', () => resolve()));

describe('ContainerShell', () => {
  it('runs many requests in one process, answering each in the order asked', async () => {
    const execs = localExecs();
    const shell = new ContainerShell(execs.open, execs.run);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        shell.run('[ "$1" = 7 ] && { echo "seven" >&2; exit 7; }; printf "%s\\n" "$1"', [String(i)]),
      ),
    );
    results.forEach((result, i) => {
      expect(result.code).toBe(i === 7 ? 7 : 0);
      expect(result.stdout.toString()).toBe(i === 7 ? '' : `${i}\n`);
      expect(result.stderr).toBe(i === 7 ? 'seven\n' : '');
    });
    expect(execs.started).toHaveLength(1);
    expect(execs.fallbacks).toEqual([]);
    shell.close();
    await exited(execs.started[0]!.child);
    expect(execs.started[0]!.child.exitCode).toBe(0);
  });

  it('runs requests as execs of their own when the helper cannot start', async () => {
    const execs = localExecs({ failOpens: true });
    const shell = new ContainerShell(execs.open, async (script) => {
      execs.fallbacks.push(script);
      return { code: 0, stdout: Buffer.from('direct'), stderr: '' };
    });
    expect((await shell.run('echo helper', [])).stdout.toString()).toBe('direct');
    expect((await shell.run('echo again', [])).stdout.toString()).toBe('direct');
    expect(execs.fallbacks).toEqual(['echo helper', 'echo again']);
  });

  it('answers what the helper left unanswered when it died, and everything after, through execs', async () => {
    const execs = localExecs();
    const shell = new ContainerShell(execs.open, execs.run);
    expect((await shell.run('echo one', [])).stdout.toString()).toBe('one\n');
    // The helper is killed while a request runs; another waits behind it.
    const slow = shell.run('sleep 0.3; echo slow', []);
    const queued = shell.run('echo queued', []);
    setTimeout(() => execs.started[0]!.child.kill('SIGKILL'), 50);
    expect((await slow).stdout.toString()).toBe('slow\n');
    expect((await queued).stdout.toString()).toBe('queued\n');
    expect((await shell.run('echo later', [])).stdout.toString()).toBe('later\n');
    expect(execs.fallbacks).toEqual(['sleep 0.3; echo slow', 'echo queued', 'echo later']);
  });

  it('stops trusting a helper that prints something other than replies', async () => {
    const execs = localExecs();
    let killed = false;
    // A "helper" that answers its first request with a line that is no reply header.
    const garbled: ExecOpener = async () => {
      const stdout = new PassThrough();
      return {
        stdin: new Writable({
          write(_chunk, _encoding, callback) {
            stdout.write('sh: something went wrong\n');
            callback();
          },
        }),
        stdout,
        stderr: new PassThrough(),
        exit: new Promise(() => {}),
        resize() {},
        signal() {},
        close() {
          killed = true;
        },
      };
    };
    const shell = new ContainerShell(garbled, execs.run);
    expect((await shell.run('echo fine', [])).stdout.toString()).toBe('fine\n');
    expect(execs.fallbacks).toEqual(['echo fine']);
    expect(killed).toBe(true);
  });

  it('fails a request whose argument cannot be sent, without disturbing the others', async () => {
    const execs = localExecs();
    const shell = new ContainerShell(execs.open, execs.run);
    const before = shell.run('echo before', []);
    await expect(shell.run('echo "$1"', ['a\0b'])).rejects.toThrow(/NUL/);
    expect((await before).stdout.toString()).toBe('before\n');
    expect((await shell.run('echo after', [])).stdout.toString()).toBe('after\n');
    shell.close();
  });

  it('closed while starting, still answers what it was asked, then exits', async () => {
    const execs = localExecs();
    const shell = new ContainerShell(execs.open, execs.run);
    const asked = shell.run('echo asked', []);
    shell.close();
    expect((await asked).stdout.toString()).toBe('asked\n');
    await exited(execs.started[0]!.child);
    await expect(shell.run('echo late', [])).rejects.toThrow(/ended/);
    expect(execs.running()).toEqual([]);
  });
});

describe('SpareExec', () => {
  it('hands out a process started ahead, and starts the next one', async () => {
    const execs = localExecs();
    const spares = new SpareExec(execs.open);
    await waitFor('the spare started', () => execs.started.length > 0, 10_000, 5);
    expect(execs.started).toHaveLength(1);
    const session = await spares.start('echo "ok $1"; exec cat', ['a\nb']);
    expect(execs.started).toHaveLength(2);
    expect(execs.started[0]!.child.stdout).toBe(session.stdout);
    const out: Buffer[] = [];
    session.stdout.on('data', (c: Buffer) => out.push(c));
    // What follows the request on stdin is the script's stdin (a writer's file content).
    session.stdin.end('content\nmore');
    expect(await session.exit).toEqual({ code: 0 });
    expect(Buffer.concat(out).toString()).toBe('ok a\nb\ncontent\nmore');
    spares.close();
    await exited(execs.started[1]!.child);
    expect(execs.running()).toEqual([]);
  });

  it('opens an exec of its own when the spare died or never started', async () => {
    const execs = localExecs();
    const spares = new SpareExec(execs.open);
    await waitFor('the spare started', () => execs.started.length > 0, 10_000, 5);
    execs.started[0]!.child.kill('SIGKILL');
    await exited(execs.started[0]!.child);
    const session = await spares.start('echo direct', []);
    const out: Buffer[] = [];
    session.stdout.on('data', (c: Buffer) => out.push(c));
    await session.exit;
    expect(Buffer.concat(out).toString()).toBe('direct\n');
    // The spare it started meanwhile, the direct one, and the one after.
    expect(execs.started.map((s) => s.script.startsWith('echo'))).toEqual([false, false, true]);
    spares.close();

    const failing = localExecs({ failOpens: true });
    const none = new SpareExec(failing.open);
    await expect(none.start('echo x', [])).rejects.toThrow(/not connected/);
  });

  it('ends its waiting spare when closed, and starts no more', async () => {
    const execs = localExecs();
    const spares = new SpareExec(execs.open);
    spares.close();
    await waitFor('the spare started', () => execs.started.length > 0, 10_000, 5);
    await exited(execs.started[0]!.child);
    expect(execs.started[0]!.child.exitCode).toBe(0);
    const session = await spares.start('exit 3', []);
    expect(await session.exit).toEqual({ code: 3 });
    expect(execs.started).toHaveLength(2);
    expect(execs.running()).toEqual([]);
  });
});

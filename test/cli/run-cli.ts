import { spawn } from 'node:child_process';
import { mkdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { buildCli, CLI_BUNDLE } from '../../cli/scripts/build.ts';
import { runCli } from '../../cli/src/cli.ts';
import type { Io } from '../../cli/src/command.ts';

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in this process with its own environment and captured output (no network fake: real fetch). */
export async function cliInProcess(argv: string[], env: Record<string, string>, stdin = ''): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const io: Io = {
    stdout: { write: (text) => (stdout += String(text)) },
    stderr: { write: (text) => (stderr += String(text)) },
    stdin: Readable.from([stdin]),
    env,
  };
  const code = await runCli(argv, io);
  return { code, stdout, stderr };
}

/**
 * Builds the bundle as `npm run build -w @anvil/cli` does (the tests run what users run) and puts it on a PATH
 * folder as `anvil`, so completion scripts and shells find it by name.
 */
export async function builtCli(dir: string): Promise<{ bundle: string; bin: string }> {
  const bundle = await buildCli(CLI_BUNDLE);
  const bin = join(dir, 'bin');
  mkdirSync(bin, { recursive: true });
  symlinkSync(bundle, join(bin, 'anvil'));
  return { bundle, bin };
}

/** Runs the built CLI as a process (node's own binary, no loader) and collects everything. */
export function cliProcess(
  bundle: string,
  argv: string[],
  env: Record<string, string>,
  options: { stdin?: string; timeoutMs?: number } = {},
): Promise<CliRun> {
  return runProcess(process.execPath, [bundle, ...argv], env, options);
}

/**
 * Runs a program to completion without blocking this process (which serves the control plane the program
 * may call: spawnSync would deadlock it).
 */
export function runProcess(
  command: string,
  args: string[],
  env: Record<string, string>,
  options: { stdin?: string; timeoutMs?: number; cwd?: string } = {},
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(options.cwd ? { cwd: options.cwd } : {}),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.stdin ?? '');
  });
}

import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../../logger.ts';
import type { JoinTokenService } from '../hosts/join-tokens.ts';

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
export const AGENT_MAIN = join(REPO_ROOT, 'agent', 'src', 'main.ts');

/**
 * Environment passed to the local agent: what it needs to find Docker and its own options, and nothing
 * of the control plane's secrets (database URL, secret keys, bootstrap key, metrics token).
 */
const PASSED_ENV = [
  'PATH',
  'HOME',
  'USER',
  'LANG',
  'TZ',
  'TMPDIR',
  'NODE_EXTRA_CA_CERTS',
  'DOCKER_HOST',
  'DOCKER_TLS_VERIFY',
  'DOCKER_CERT_PATH',
  'ANVIL_SIMULATE_GPUS',
  'ANVIL_NVML_LIBRARY',
  'ANVIL_VOLUME_ROOT',
  'ANVIL_LOG_LEVEL',
];

export interface LocalAgentOptions {
  /** http://127.0.0.1:<port>, where the control plane listens. */
  controlPlaneUrl: string;
  stateDir: string;
  logLevel: string;
  /** Makes a single-use join token; called only when the state directory holds no credential yet. */
  createJoinToken: () => Promise<string>;
  logger: Logger;
  /** Where the agent's JSON log lines go (the control plane's stdout). */
  out: NodeJS.WritableStream;
  agentMain?: string;
  env?: Record<string, string | undefined>;
}

/** The URL a process on this machine reaches the listening server at. */
export function localUrl(address: AddressInfo | string | null): string {
  if (!address || typeof address === 'string') throw new Error('the server is not listening on a TCP port');
  let host = address.address;
  if (host === '0.0.0.0') host = '127.0.0.1';
  else if (host === '::') host = '::1';
  return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
}

/**
 * `npm start` runs one agent for the machine the control plane is on, as a child process: registered
 * with a single-use join token on its first start, with the credential in its state directory on the
 * later ones. Its log lines join the control plane's; it is stopped (SIGTERM) with the control plane,
 * and its containers keep running, as with any agent.
 */
export class LocalAgent {
  #child: ChildProcess | null = null;
  #exited: Promise<number | null> | null = null;
  #stopping = false;

  constructor(private readonly options: LocalAgentOptions) {}

  get pid(): number | null {
    return this.#child?.pid ?? null;
  }

  async start(): Promise<boolean> {
    const { options } = this;
    const main = options.agentMain ?? AGENT_MAIN;
    if (!existsSync(main)) {
      options.logger.warn({ main }, 'local agent not started: the agent is not installed here');
      return false;
    }
    mkdirSync(options.stateDir, { recursive: true, mode: 0o700 });
    const sourceEnv = options.env ?? process.env;
    const env: Record<string, string> = {};
    for (const name of PASSED_ENV) {
      const value = sourceEnv[name];
      if (value !== undefined) env[name] = value;
    }
    env['ANVIL_LOG_LEVEL'] ??= options.logLevel === 'silent' ? 'error' : options.logLevel;
    // The control plane's own address, even a non-loopback one it listens on, is reached over the
    // machine's loopback: plain http:// stays on this machine.
    env['ANVIL_ALLOW_INSECURE_CONTROL_PLANE'] = 'true';
    const hasCredential = existsSync(join(options.stateDir, 'credential.json'));
    // The token travels in the environment, not on the command line, where `ps` would show it.
    if (!hasCredential) env['ANVIL_JOIN_TOKEN'] = await options.createJoinToken();

    const child = spawn(
      process.execPath,
      ['--import', 'tsx', main, '--control-plane', options.controlPlaneUrl, '--state-dir', options.stateDir],
      { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#child = child;
    this.#exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        if (this.#stopping) options.logger.info({ code, signal }, 'local agent stopped');
        else {
          options.logger.error(
            { code, signal, stateDir: options.stateDir },
            `local agent exited; if it was refused (deleted host, lost credential), remove ${join(
              options.stateDir,
              'credential.json',
            )} to register it again, or set ANVIL_LOCAL_AGENT=0`,
          );
        }
        resolve(code);
      });
      child.once('error', (error) => {
        options.logger.error({ err: error }, 'local agent could not be started');
        resolve(null);
      });
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      options.out.write(`${line}\n`);
    });
    createInterface({ input: child.stderr! }).on('line', (line) => {
      if (line.trim() !== '') options.logger.warn({ localAgent: true }, line);
    });
    options.logger.info(
      { pid: child.pid, stateDir: options.stateDir, registering: !hasCredential },
      'local agent started (set ANVIL_LOCAL_AGENT=0 to run without it)',
    );
    return true;
  }

  /** SIGTERM, then SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 10_000): Promise<void> {
    const child = this.#child;
    if (!child || !this.#exited) return;
    this.#stopping = true;
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    timer.unref();
    await this.#exited;
    clearTimeout(timer);
  }
}

/** Starts the local agent for `npm start`; failures are logged, never fatal to the control plane. */
export async function startLocalAgent(options: {
  dataDir: string;
  logLevel: string;
  joinTokens: JoinTokenService;
  address: AddressInfo | string | null;
  logger: Logger;
  out: NodeJS.WritableStream;
}): Promise<LocalAgent | null> {
  try {
    const agent = new LocalAgent({
      controlPlaneUrl: localUrl(options.address),
      stateDir: join(options.dataDir, 'local-agent'),
      logLevel: options.logLevel,
      createJoinToken: async () => {
        const { value } = await options.joinTokens.create(
          { userId: null, keyId: null },
          { description: 'local agent (npm start)', maxUses: 1, expiresIn: 600 },
        );
        return value;
      },
      logger: options.logger,
      out: options.out,
    });
    return (await agent.start()) ? agent : null;
  } catch (error) {
    options.logger.error({ err: error }, 'local agent could not be started');
    return null;
  }
}

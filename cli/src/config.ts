import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { CliError, EXIT, UsageError } from './exit-codes.ts';

export interface Profile {
  url: string;
  key: string;
  /** From /v2/auth/verify at login, for `anvil profiles`. */
  accountId?: string;
  keyId?: string;
}

export interface ConfigFile {
  current: string | null;
  profiles: Record<string, Profile>;
}

export type Env = Record<string, string | undefined>;

/** `$XDG_CONFIG_HOME/anvil/config.json`, else `~/.config/anvil/config.json`. */
export function configPath(env: Env): string {
  const base = env['XDG_CONFIG_HOME'] || join(env['HOME'] || '/', '.config');
  return join(base, 'anvil', 'config.json');
}

const PROFILE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export function checkProfileName(name: string): string {
  if (!PROFILE_NAME.test(name))
    throw new UsageError(`profile name "${name}": use letters, digits, '.', '_' or '-' (at most 64)`);
  return name;
}

/**
 * The file holding API keys: written whole to a temporary file created with mode 0600 and renamed over the
 * old one, so a key is never readable by others, not even for a moment, and a crash leaves the old file.
 */
export class ConfigStore {
  constructor(
    readonly path: string,
    private readonly warn: (line: string) => void,
  ) {}

  read(): ConfigFile {
    if (!existsSync(this.path)) return { current: null, profiles: {} };
    const mode = statSync(this.path).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      // As ssh does with private keys, but repairing rather than refusing: the file is ours.
      this.warn(`${this.path} was readable by others (mode ${mode.toString(8)}); set it to 600`);
      chmodSync(this.path, 0o600);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(this.path, 'utf8'));
    } catch (error) {
      throw new CliError(`${this.path} is not valid JSON (${(error as Error).message})`, EXIT.failure);
    }
    const file = parsed as Partial<ConfigFile>;
    return {
      current: typeof file.current === 'string' ? file.current : null,
      profiles: file.profiles && typeof file.profiles === 'object' ? file.profiles : {},
    };
  }

  write(config: ConfigFile): void {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const temporary = `${this.path}.${process.pid}.tmp`;
    writeFileSync(temporary, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
    chmodSync(temporary, 0o600);
    renameSync(temporary, this.path);
  }
}

export interface Credentials {
  url: string;
  key: string;
  /** The profile they came from; null when both came from ANVIL_URL and ANVIL_API_KEY. */
  profile: string | null;
}

/**
 * Which control plane and key a command uses: ANVIL_URL and ANVIL_API_KEY override the profile's
 * values; the profile is --profile, else ANVIL_PROFILE, else the current one (`anvil login` sets it).
 */
export function resolveCredentials(
  config: ConfigFile,
  env: Env,
  profileFlag: string | undefined,
): Credentials {
  const name = profileFlag ?? env['ANVIL_PROFILE'] ?? config.current ?? undefined;
  const profile = name === undefined ? undefined : config.profiles[name];
  if (name !== undefined && profile === undefined && (profileFlag ?? env['ANVIL_PROFILE']) !== undefined) {
    throw new CliError(`no profile "${name}": run anvil login --profile ${name}`, EXIT.unauthenticated);
  }
  const url = env['ANVIL_URL'] || profile?.url;
  const key = env['ANVIL_API_KEY'] || profile?.key;
  if (!url || !key) {
    throw new CliError(
      'not logged in: run anvil login --url <control plane> --key <API key> (or set ANVIL_URL and ANVIL_API_KEY)',
      EXIT.unauthenticated,
    );
  }
  return { url: normaliseUrl(url), key, profile: profile ? name! : null };
}

export function normaliseUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`"${url}" is not a URL (e.g. https://anvil.example.com)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new UsageError(`"${url}": the control plane's URL starts with https:// or http://`);
  return parsed.toString().replace(/\/+$/, '');
}

import { resolve } from 'node:path';
import { isWellFormedApiKey } from '@anvil/shared';

/** Everything the control plane reads from its environment, validated once at start-up. */
export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | null;
  ownerEmail: string;
  bootstrapApiKey: string | null;
  logLevel: LogLevel;
  /** Largest request body accepted, in bytes. */
  bodyLimitBytes: number;
  /** How long graceful shutdown waits for in-flight requests before closing connections. */
  shutdownTimeoutMs: number;
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A configuration value that prevents start-up; its message names the variable and the reason. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    reason: string,
  ) {
    super(`invalid configuration: ${variable} ${reason}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be an integer, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

const EMAIL = /^[^\s@]+@[^\s@]+$/;

export function loadConfig(env: Env = process.env): Config {
  const databaseUrl = env['DATABASE_URL'] || null;
  if (databaseUrl !== null) {
    let url: URL;
    try {
      url = new URL(databaseUrl);
    } catch {
      throw new ConfigError('DATABASE_URL', 'is not a URL (expected postgres://user:pass@host:5432/db)');
    }
    if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
      throw new ConfigError('DATABASE_URL', `must use postgres:// or postgresql://, got "${url.protocol}"`);
    }
  }

  const ownerEmail = env['ANVIL_OWNER_EMAIL'] || 'admin@localhost';
  if (!EMAIL.test(ownerEmail))
    throw new ConfigError('ANVIL_OWNER_EMAIL', `is not an e-mail address: "${ownerEmail}"`);

  const bootstrapApiKey = env['ANVIL_BOOTSTRAP_API_KEY'] || null;
  if (bootstrapApiKey !== null && !isWellFormedApiKey(bootstrapApiKey)) {
    throw new ConfigError(
      'ANVIL_BOOTSTRAP_API_KEY',
      'is not a well-formed Anvil key (anv_live_ or anv_test_, 32 random base62 characters and a 6-character checksum)',
    );
  }

  const logLevel = (env['LOG_LEVEL'] || 'info') as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }

  return {
    port: integer(env, 'PORT', 8080, 0, 65535),
    host: env['ANVIL_HOST'] || '0.0.0.0',
    dataDir: resolve(env['ANVIL_DATA_DIR'] || './data'),
    databaseUrl,
    ownerEmail,
    bootstrapApiKey,
    logLevel,
    bodyLimitBytes: integer(env, 'ANVIL_BODY_LIMIT_BYTES', 1_048_576, 1024, 1_073_741_824),
    shutdownTimeoutMs: integer(env, 'ANVIL_SHUTDOWN_TIMEOUT_MS', 10_000, 0, 600_000),
  };
}

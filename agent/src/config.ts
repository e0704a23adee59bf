/**
 * Agent configuration.
 *
 * Sources, highest precedence first:
 *   1. command-line flags      --control-plane, --join-token, --state-dir, --volume-root,
 *                              --simulate-gpus, --nvml-library, --log-level, --host-images, --config
 *   2. environment variables   ANVIL_CONTROL_PLANE, ANVIL_JOIN_TOKEN, ANVIL_STATE_DIR,
 *                              ANVIL_VOLUME_ROOT, ANVIL_SIMULATE_GPUS, ANVIL_NVML_LIBRARY,
 *                              ANVIL_LOG_LEVEL, ANVIL_HOST_IMAGES, ANVIL_AGENT_CONFIG (config file path)
 *   3. JSON config file        { "controlPlane", "joinToken", "stateDir", "volumeRoot",
 *                                "simulateGpus", "nvmlLibrary", "logLevel", "hostImages" }
 *   4. defaults                stateDir /var/lib/anvil-agent, volumeRoot <stateDir>/volumes,
 *                              logLevel info
 * An empty environment variable counts as unset. Docker is reached through DOCKER_HOST (and
 * DOCKER_TLS_VERIFY / DOCKER_CERT_PATH) when set, else /var/run/docker.sock.
 * A join token is a secret: prefer ANVIL_JOIN_TOKEN or the file to the flag, which `ps` shows.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { parseSimulateGpus } from './gpu/simulate.ts';

export interface AgentConfig {
  controlPlane: string;
  joinToken: string | null;
  stateDir: string;
  volumeRoot: string;
  simulateGpus: string | null;
  nvmlLibrary: string | null;
  logLevel: string;
  /**
   * Host images: references (or prefixes ending in `*`), comma-separated, of images the operator loaded
   * on this host and lets EVERY account run without a pull. Empty by default: every image is then pulled
   * with its account's credentials before each create. See image-policy.ts and the README.
   */
  hostImages: string[];
}

export const DEFAULT_STATE_DIR = '/var/lib/anvil-agent';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const ConfigFile = Type.Object(
  {
    controlPlane: Type.Optional(Type.String()),
    joinToken: Type.Optional(Type.String()),
    stateDir: Type.Optional(Type.String()),
    volumeRoot: Type.Optional(Type.String()),
    simulateGpus: Type.Optional(Type.String()),
    nvmlLibrary: Type.Optional(Type.String()),
    logLevel: Type.Optional(Type.String()),
    hostImages: Type.Optional(Type.String()),
  },
  // A misspelt key would otherwise be ignored in silence.
  { additionalProperties: false },
);

type Keys = keyof AgentConfig;
const FLAGS: Record<Keys, string> = {
  controlPlane: 'control-plane',
  joinToken: 'join-token',
  stateDir: 'state-dir',
  volumeRoot: 'volume-root',
  simulateGpus: 'simulate-gpus',
  nvmlLibrary: 'nvml-library',
  logLevel: 'log-level',
  hostImages: 'host-images',
};
const ENV: Record<Keys, string> = {
  controlPlane: 'ANVIL_CONTROL_PLANE',
  joinToken: 'ANVIL_JOIN_TOKEN',
  stateDir: 'ANVIL_STATE_DIR',
  volumeRoot: 'ANVIL_VOLUME_ROOT',
  simulateGpus: 'ANVIL_SIMULATE_GPUS',
  nvmlLibrary: 'ANVIL_NVML_LIBRARY',
  logLevel: 'ANVIL_LOG_LEVEL',
  hostImages: 'ANVIL_HOST_IMAGES',
};

export const USAGE = `usage: npm run agent -- --control-plane <url> [--join-token <token>] [--state-dir <dir>]
                       [--volume-root <dir>] [--simulate-gpus 2xH100] [--nvml-library <path>]
                       [--log-level info] [--host-images 'ref,prefix/*'] [--config <file.json>]
Each flag also reads from an ANVIL_* environment variable or the JSON config file (see agent/README.md).`;

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

export interface ConfigSources {
  argv: string[];
  env: Record<string, string | undefined>;
  readTextFile?: (path: string) => Promise<string>;
}

export type LoadedConfig = { help: true } | { help: false; config: AgentConfig };

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}

async function readConfigFile(path: string, read: (path: string) => Promise<string>) {
  let text: string;
  try {
    text = await read(path);
  } catch (err) {
    throw new ConfigError(`config file ${path}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`config file ${path}: not JSON (${(err as Error).message})`);
  }
  if (!Value.Check(ConfigFile, parsed)) {
    const first = Value.Errors(ConfigFile, parsed).First();
    throw new ConfigError(`config file ${path}: ${first?.path || '/'} ${first?.message ?? 'is invalid'}`);
  }
  return parsed;
}

export async function loadConfig(sources: ConfigSources): Promise<LoadedConfig> {
  let values: Record<string, string | boolean | undefined>;
  try {
    const options = Object.fromEntries(
      Object.values(FLAGS).map((flag) => [flag, { type: 'string' as const }]),
    );
    values = parseArgs({
      args: sources.argv,
      options: { ...options, config: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new ConfigError(`${(err as Error).message}\n${USAGE}`);
  }
  if (values['help']) return { help: true };

  const configPath =
    nonEmpty(values['config'] as string | undefined) ?? nonEmpty(sources.env['ANVIL_AGENT_CONFIG']);
  const file = configPath
    ? await readConfigFile(configPath, sources.readTextFile ?? ((p) => readFile(p, 'utf8')))
    : {};

  const pick = (key: Keys): string | undefined =>
    nonEmpty(values[FLAGS[key]] as string | undefined) ??
    nonEmpty(sources.env[ENV[key]]) ??
    nonEmpty(file[key]);

  const controlPlane = pick('controlPlane');
  if (!controlPlane) {
    throw new ConfigError('no control plane given: pass --control-plane <url> or set ANVIL_CONTROL_PLANE');
  }
  const stateDir = pick('stateDir') ?? DEFAULT_STATE_DIR;
  const logLevel = pick('logLevel') ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw new ConfigError(`log level ${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(', ')}`);
  }
  const simulateGpus = pick('simulateGpus') ?? null;
  if (simulateGpus) {
    try {
      parseSimulateGpus(simulateGpus);
    } catch (err) {
      throw new ConfigError((err as Error).message);
    }
  }
  return {
    help: false,
    config: {
      controlPlane,
      joinToken: pick('joinToken') ?? null,
      stateDir,
      volumeRoot: pick('volumeRoot') ?? join(stateDir, 'volumes'),
      simulateGpus,
      nvmlLibrary: pick('nvmlLibrary') ?? null,
      logLevel,
      hostImages: (pick('hostImages') ?? '')
        .split(',')
        .map((entry) => entry.trim())
        .filter((entry) => entry !== ''),
    },
  };
}

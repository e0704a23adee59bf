/**
 * Agent configuration.
 *
 * Sources, highest precedence first:
 *   1. command-line flags      --control-plane, --join-token, --state-dir, --volume-root,
 *                              --simulate-gpus, --nvml-library, --log-level, --config,
 *                              --allow-insecure-control-plane true
 *   2. environment variables   ANVIL_CONTROL_PLANE, ANVIL_JOIN_TOKEN, ANVIL_STATE_DIR,
 *                              ANVIL_VOLUME_ROOT, ANVIL_SIMULATE_GPUS, ANVIL_NVML_LIBRARY,
 *                              ANVIL_LOG_LEVEL, ANVIL_AGENT_CONFIG (path of the config file),
 *                              ANVIL_ALLOW_INSECURE_CONTROL_PLANE
 *                              ANVIL_DIRECT_PORTS_ADDRESS, ANVIL_DIRECT_PORTS_RANGE,
 *                              ANVIL_RENDEZVOUS_ADDRESS
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
import { isIP } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { insecureControlPlaneRefusal } from './connection/url.ts';
import { parseSimulateGpus } from './gpu/simulate.ts';

export interface AgentConfig {
  controlPlane: string;
  joinToken: string | null;
  stateDir: string;
  volumeRoot: string;
  simulateGpus: string | null;
  nvmlLibrary: string | null;
  logLevel: string;
  /** Accepts a ws:// (http://) control plane that is not on loopback; off: such a URL is refused. */
  allowInsecureControlPlane: boolean;
  /**
   * Operator opt-in: publish workload ports on this one host address (never all of them), on ports
   * Docker picks from directPortsRange. Null (the default): nothing is published; customers reach ports
   * through the control plane's proxy, SSH relay and tunnels, where authentication applies.
   */
  directPortsAddress: string | null;
  directPortsRange: string | null;
  /**
   * The host's address on the network its fellow GPU hosts reach it by: multi-host training gangs publish
   * their rendezvous port here (admitted only from the gang's other hosts). Null: single-host gangs only.
   */
  rendezvousAddress: string | null;
  /**
   * Host images: references (or prefixes ending in `*`), comma-separated, of images the operator loaded
   * on this host and lets EVERY account run without a pull. Empty by default: every image is then pulled
   * with its account's credentials before each create. See image-policy.ts and the README.
   */
  hostImages: string[];
  /**
   * Where install.sh unpacked the agent's artifact (versions/<v>, `current` link), ANVIL_INSTALL_DIR:
   * the agent upgrades itself there when the control plane asks. Null (run from a checkout): it cannot.
   */
  installDir: string | null;
  /**
   * The worker API port (worker-api/relay.ts) this host's containers reach the control plane's worker API
   * through (RunPod-protocol workers). Default 7071; 0 turns it off.
   */
  workerApiPort: number;
}

/** The worker API port when ANVIL_WORKER_API_PORT is not set. */
export const DEFAULT_WORKER_API_PORT = 7071;

/** The range direct ports are taken from when ANVIL_DIRECT_PORTS_RANGE is not set. */
export const DEFAULT_DIRECT_PORTS_RANGE = '30000-32767';

/** The direct-ports address and range as the agent uses them, or null when direct ports are off. */
export function directPortsOf(config: Pick<AgentConfig, 'directPortsAddress' | 'directPortsRange'>) {
  if (!config.directPortsAddress) return null;
  const [first, last] = (config.directPortsRange ?? DEFAULT_DIRECT_PORTS_RANGE).split('-').map(Number);
  return { address: config.directPortsAddress, first: first ?? 0, last: last ?? 0 };
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
    allowInsecureControlPlane: Type.Optional(Type.String()),
    directPortsAddress: Type.Optional(Type.String()),
    directPortsRange: Type.Optional(Type.String()),
    rendezvousAddress: Type.Optional(Type.String()),
    hostImages: Type.Optional(Type.String()),
    installDir: Type.Optional(Type.String()),
    workerApiPort: Type.Optional(Type.String()),
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
  allowInsecureControlPlane: 'allow-insecure-control-plane',
  directPortsAddress: 'direct-ports-address',
  directPortsRange: 'direct-ports-range',
  rendezvousAddress: 'rendezvous-address',
  hostImages: 'host-images',
  installDir: 'install-dir',
  workerApiPort: 'worker-api-port',
};
const ENV: Record<Keys, string> = {
  controlPlane: 'ANVIL_CONTROL_PLANE',
  joinToken: 'ANVIL_JOIN_TOKEN',
  stateDir: 'ANVIL_STATE_DIR',
  volumeRoot: 'ANVIL_VOLUME_ROOT',
  simulateGpus: 'ANVIL_SIMULATE_GPUS',
  nvmlLibrary: 'ANVIL_NVML_LIBRARY',
  logLevel: 'ANVIL_LOG_LEVEL',
  allowInsecureControlPlane: 'ANVIL_ALLOW_INSECURE_CONTROL_PLANE',
  directPortsAddress: 'ANVIL_DIRECT_PORTS_ADDRESS',
  directPortsRange: 'ANVIL_DIRECT_PORTS_RANGE',
  rendezvousAddress: 'ANVIL_RENDEZVOUS_ADDRESS',
  hostImages: 'ANVIL_HOST_IMAGES',
  installDir: 'ANVIL_INSTALL_DIR',
  workerApiPort: 'ANVIL_WORKER_API_PORT',
};

export const USAGE = `usage: npm run agent -- --control-plane <url> [--join-token <token>] [--state-dir <dir>]
                       [--volume-root <dir>] [--simulate-gpus 2xH100] [--nvml-library <path>]
                       [--log-level info] [--config <file.json>]
                       [--allow-insecure-control-plane true]   (needed for ws:// or http:// off loopback)
                       [--direct-ports-address <ip>] [--direct-ports-range 30000-32767]
                       [--log-level info] [--host-images 'ref,prefix/*'] [--worker-api-port 7071]
                       [--config <file.json>]
                       [--install-dir /opt/anvil-agent]   (set by install.sh: self-upgrades go there)
       npm run agent -- --probe [--nvml-library <path>] [--simulate-gpus 2xH100]
                       (print the GPU inventory and one metrics/health sample as JSON, then exit)
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

/**
 * `--probe`: print the GPU inventory and one metrics/health sample as JSON and exit; needs no control
 * plane, so only the settings that choose the GPU source count.
 */
export interface ProbeConfig {
  simulateGpus: string | null;
  nvmlLibrary: string | null;
  stateDir: string;
  logLevel: string;
}

export type LoadedConfig =
  | { help: true }
  | { help: false; probe: ProbeConfig }
  | { help: false; probe?: undefined; config: AgentConfig };

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
      options: {
        ...options,
        config: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        probe: { type: 'boolean' },
      },
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

  const pickLogLevel = (fallback: string): string => {
    const logLevel = pick('logLevel') ?? fallback;
    if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
      throw new ConfigError(
        `log level ${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(', ')}`,
      );
    }
    return logLevel;
  };
  const pickSimulateGpus = (): string | null => {
    const simulateGpus = pick('simulateGpus') ?? null;
    if (simulateGpus) {
      try {
        parseSimulateGpus(simulateGpus);
      } catch (err) {
        throw new ConfigError((err as Error).message);
      }
    }
    return simulateGpus;
  };

  if (values['probe']) {
    const simulateGpus = pickSimulateGpus();
    // Logs go to stderr during a probe; warnings only unless asked, so stdout is the JSON alone.
    const logLevel = pickLogLevel('warn');
    return {
      help: false,
      probe: {
        simulateGpus,
        nvmlLibrary: pick('nvmlLibrary') ?? null,
        stateDir: pick('stateDir') ?? DEFAULT_STATE_DIR,
        logLevel,
      },
    };
  }

  const controlPlane = pick('controlPlane');
  if (!controlPlane) {
    throw new ConfigError('no control plane given: pass --control-plane <url> or set ANVIL_CONTROL_PLANE');
  }
  const insecure = (pick('allowInsecureControlPlane') ?? 'false').toLowerCase();
  if (!['true', 'false', '1', '0'].includes(insecure)) {
    throw new ConfigError(`allow insecure control plane ${JSON.stringify(insecure)}: expected true or false`);
  }
  const stateDir = pick('stateDir') ?? DEFAULT_STATE_DIR;
  const logLevel = pickLogLevel('info');
  const simulateGpus = pickSimulateGpus();
  const allowInsecureControlPlane = insecure === 'true' || insecure === '1';
  let refusal: string | null = null;
  try {
    refusal = insecureControlPlaneRefusal(controlPlane, allowInsecureControlPlane);
  } catch {
    // Not a URL: said when the agent dials, as before.
  }
  if (refusal) throw new ConfigError(refusal);
  const directPortsAddress = pick('directPortsAddress') ?? null;
  if (directPortsAddress !== null) {
    if (isIP(directPortsAddress) === 0)
      throw new ConfigError(
        `direct ports address ${JSON.stringify(directPortsAddress)}: expected an IP address`,
      );
    if (['0.0.0.0', '::'].includes(directPortsAddress))
      throw new ConfigError(
        `direct ports address ${directPortsAddress}: name one address of the host, not every address`,
      );
  }
  const rendezvousAddress = pick('rendezvousAddress') ?? null;
  if (rendezvousAddress !== null && (isIP(rendezvousAddress) !== 4 || rendezvousAddress === '0.0.0.0'))
    throw new ConfigError(
      `rendezvous address ${JSON.stringify(rendezvousAddress)}: expected one IPv4 address of the host`,
    );
  const directPortsRange = pick('directPortsRange') ?? null;
  if (directPortsRange !== null) {
    const match = /^(\d{1,5})-(\d{1,5})$/.exec(directPortsRange);
    const [first, last] = [Number(match?.[1]), Number(match?.[2])];
    if (!match || first < 1 || last > 65535 || first > last)
      throw new ConfigError(
        `direct ports range ${JSON.stringify(directPortsRange)}: expected <first>-<last> within 1-65535`,
      );
  }
  const workerApiText = pick('workerApiPort') ?? String(DEFAULT_WORKER_API_PORT);
  const workerApiPort = /^\d{1,5}$/.test(workerApiText) ? Number(workerApiText) : Number.NaN;
  if (!(workerApiPort >= 0 && workerApiPort <= 65535))
    throw new ConfigError(
      `worker API port ${JSON.stringify(workerApiText)}: expected a port from 1 to 65535, or 0 for none`,
    );
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
      allowInsecureControlPlane,
      directPortsAddress,
      directPortsRange,
      rendezvousAddress,
      hostImages: (pick('hostImages') ?? '')
        .split(',')
        .map((entry) => entry.trim())
        .filter((entry) => entry !== ''),
      installDir: installDirOf(pick('installDir')),
      workerApiPort,
    },
  };
}

function installDirOf(dir: string | undefined): string | null {
  if (dir === undefined) return null;
  if (!dir.startsWith('/'))
    throw new ConfigError(`install dir ${JSON.stringify(dir)}: expected an absolute path`);
  return dir.replace(/\/+$/, '') || '/';
}

import { ApiError } from '@anvil/shared';

/**
 * An endpoint's configuration (spec: Serverless endpoint.configuration), its bounds and defaults. The
 * spec's update bounds (workerCount 1-50, timeoutSeconds 10-3600, targetUtilization 10-90) answer 400
 * INVALID_CONFIGURATION {field, value, maximum|minimum}; the other bounds are Anvil's and behave the same.
 */

export interface AutoScaling {
  enabled: boolean;
  minWorkers: number;
  maxWorkers: number;
  /** Percent of the workers' slots (maxConcurrency each) the autoscaler aims to keep busy. */
  targetUtilization: number;
  /** Seconds after a scale-up before the next scale-up. */
  scaleUpCooldown: number;
  /** Seconds demand must stay below the current size (and since the last change) before a scale-down. */
  scaleDownCooldown: number;
}

/**
 * The worker contract: `http`, Anvil's (the control plane calls the worker's port through the agent,
 * worker-client.ts), or `runpod`, RunPod's worker library as it is (the worker pulls jobs from the worker
 * API through its agent, runpod/).
 */
export const WORKER_PROTOCOLS = ['http', 'runpod'] as const;
export type WorkerProtocol = (typeof WORKER_PROTOCOLS)[number];

export interface EndpointConfiguration {
  workerCount: number;
  maxConcurrency: number;
  timeoutSeconds: number;
  environmentVariables: Record<string, string>;
  autoScaling: AutoScaling;
  workerProtocol: WorkerProtocol;
}

export type ConfigurationInput = {
  workerCount?: number | undefined;
  maxConcurrency?: number | undefined;
  timeoutSeconds?: number | undefined;
  environmentVariables?: Record<string, string> | undefined;
  autoScaling?: Partial<AutoScaling> | undefined;
  workerProtocol?: WorkerProtocol | undefined;
};

/** [minimum, maximum] of each numeric field, by its path in the request. */
export const BOUNDS = {
  workerCount: [1, 50],
  maxConcurrency: [1, 100],
  timeoutSeconds: [10, 3600],
  'autoScaling.minWorkers': [0, 50],
  'autoScaling.maxWorkers': [1, 50],
  'autoScaling.targetUtilization': [10, 90],
  'autoScaling.scaleUpCooldown': [0, 3600],
  'autoScaling.scaleDownCooldown': [0, 86_400],
  gpuCount: [1, 8],
} as const satisfies Record<string, readonly [number, number]>;

export const DEFAULTS = {
  workerCount: 1,
  maxConcurrency: 1,
  timeoutSeconds: 600,
  targetUtilization: 70,
  scaleUpCooldown: 30,
  scaleDownCooldown: 300,
} as const;

const MAX_ENV_VARS = 100;
const MAX_ENV_VALUE = 32_768;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function invalidConfiguration(
  field: string,
  value: unknown,
  bound: { maximum?: number; minimum?: number; reason?: string },
): ApiError {
  const reason =
    bound.reason ??
    (bound.maximum !== undefined ? `must be at most ${bound.maximum}` : `must be at least ${bound.minimum}`);
  return new ApiError('INVALID_CONFIGURATION', `${field} ${reason}`, { field, value, ...bound });
}

export function checkBound(field: keyof typeof BOUNDS, value: number | undefined): void {
  if (value === undefined) return;
  const [minimum, maximum] = BOUNDS[field];
  if (!Number.isInteger(value)) throw invalidConfiguration(field, value, { reason: 'must be an integer' });
  if (value > maximum) throw invalidConfiguration(field, value, { maximum });
  if (value < minimum) throw invalidConfiguration(field, value, { minimum });
}

function checkEnv(env: Record<string, string> | undefined): void {
  if (env === undefined) return;
  const names = Object.keys(env);
  if (names.length > MAX_ENV_VARS)
    throw invalidConfiguration('environmentVariables', names.length, { maximum: MAX_ENV_VARS });
  for (const name of names) {
    const field = `environmentVariables.${name}`;
    if (!ENV_NAME.test(name))
      throw invalidConfiguration(field, name, {
        reason: 'is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)',
      });
    // Anvil sets these itself (worker contract): a caller's value would be overwritten anyway.
    if (name.startsWith('ANVIL_'))
      throw invalidConfiguration(field, name, { reason: 'is reserved (names starting with ANVIL_)' });
    const value = env[name];
    if (typeof value !== 'string') throw invalidConfiguration(field, value, { reason: 'must be a string' });
    if (value.length > MAX_ENV_VALUE)
      throw invalidConfiguration(field, value.length, { maximum: MAX_ENV_VALUE, reason: 'is too long' });
  }
}

/** Checks every bound of a (partial) configuration; throws the first violation. */
export function checkConfiguration(input: ConfigurationInput): void {
  checkBound('workerCount', input.workerCount);
  checkBound('maxConcurrency', input.maxConcurrency);
  checkBound('timeoutSeconds', input.timeoutSeconds);
  checkEnv(input.environmentVariables);
  const a = input.autoScaling;
  if (a) {
    checkBound('autoScaling.minWorkers', a.minWorkers);
    checkBound('autoScaling.maxWorkers', a.maxWorkers);
    checkBound('autoScaling.targetUtilization', a.targetUtilization);
    checkBound('autoScaling.scaleUpCooldown', a.scaleUpCooldown);
    checkBound('autoScaling.scaleDownCooldown', a.scaleDownCooldown);
  }
}

/** The stored configuration with `input` applied (missing fields keep their value, or take defaults). */
export function mergeConfiguration(
  current: EndpointConfiguration | null,
  input: ConfigurationInput,
): EndpointConfiguration {
  checkConfiguration(input);
  const workerCount = input.workerCount ?? current?.workerCount ?? DEFAULTS.workerCount;
  const previous = current?.autoScaling;
  const given = input.autoScaling ?? {};
  const autoScaling: AutoScaling = {
    enabled: given.enabled ?? previous?.enabled ?? false,
    minWorkers: given.minWorkers ?? previous?.minWorkers ?? 0,
    maxWorkers: given.maxWorkers ?? previous?.maxWorkers ?? Math.max(workerCount, 1),
    targetUtilization: given.targetUtilization ?? previous?.targetUtilization ?? DEFAULTS.targetUtilization,
    scaleUpCooldown: given.scaleUpCooldown ?? previous?.scaleUpCooldown ?? DEFAULTS.scaleUpCooldown,
    scaleDownCooldown: given.scaleDownCooldown ?? previous?.scaleDownCooldown ?? DEFAULTS.scaleDownCooldown,
  };
  if (autoScaling.minWorkers > autoScaling.maxWorkers) {
    throw invalidConfiguration('autoScaling.minWorkers', autoScaling.minWorkers, {
      maximum: autoScaling.maxWorkers,
      reason: `must not exceed autoScaling.maxWorkers (${autoScaling.maxWorkers})`,
    });
  }
  return {
    workerCount,
    maxConcurrency: input.maxConcurrency ?? current?.maxConcurrency ?? DEFAULTS.maxConcurrency,
    timeoutSeconds: input.timeoutSeconds ?? current?.timeoutSeconds ?? DEFAULTS.timeoutSeconds,
    environmentVariables: input.environmentVariables ?? current?.environmentVariables ?? {},
    autoScaling,
    workerProtocol: input.workerProtocol ?? current?.workerProtocol ?? 'http',
  };
}

/** Workers to start with: workerCount, within [minWorkers, maxWorkers] when autoscaling is on. */
export function initialTarget(config: EndpointConfiguration): number {
  const { autoScaling: a, workerCount } = config;
  return a.enabled ? Math.min(Math.max(workerCount, a.minWorkers), a.maxWorkers) : workerCount;
}

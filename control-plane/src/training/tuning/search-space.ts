import { ApiError } from '@anvil/shared';
import { LEARNING_RATE_MAX, LEARNING_RATE_MIN, snakeCase } from '../config.ts';
import type { ParameterValue } from '../summary.ts';

export const PARAMETER_TYPES = [
  'uniform',
  'log_uniform',
  'int_uniform',
  'int_log_uniform',
  'choice',
] as const;
export type ParameterType = (typeof PARAMETER_TYPES)[number];
export const ALGORITHMS = ['grid', 'random', 'bayesian', 'tpe', 'hyperband'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

/** `name == value` or `name != value` (value: a number, true/false, or a quoted or bare string). */
export interface Condition {
  parameter: string;
  op: '==' | '!=';
  value: ParameterValue;
}

export type ParameterSpec =
  | { name: string; type: 'uniform' | 'log_uniform'; min: number; max: number; condition: Condition | null }
  | {
      name: string;
      type: 'int_uniform' | 'int_log_uniform';
      min: number;
      max: number;
      condition: Condition | null;
    }
  | { name: string; type: 'choice'; values: ParameterValue[]; condition: Condition | null };

export type SearchSpace = ParameterSpec[];

const MAX_PARAMETERS = 20;
const MAX_CHOICES = 100;
/** Largest grid (the product of every parameter's values). */
export const MAX_GRID = 10_000;

export function invalidSpace(parameter: string, reason: string): ApiError {
  return new ApiError('INVALID_SEARCH_SPACE', `search_space.${parameter} ${reason}`, { parameter, reason });
}

function parseValue(text: string): ParameterValue {
  const t = text.trim();
  if (/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(t)) return Number(t);
  if (t === 'true' || t === 'false') return t === 'true';
  if (t === 'null') return null;
  const quoted = /^'(.*)'$|^"(.*)"$/.exec(t);
  return quoted ? (quoted[1] ?? quoted[2] ?? '') : t;
}

export function parseCondition(name: string, text: string, names: ReadonlySet<string>): Condition {
  const match = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=)\s*(.+?)\s*$/.exec(text);
  if (!match)
    throw invalidSpace(
      name,
      `condition "${text}" must read <parameter> == <value> or <parameter> != <value>`,
    );
  const parameter = snakeCase(match[1]!);
  if (!names.has(parameter) || parameter === name) {
    throw invalidSpace(
      name,
      `condition names ${parameter}, which is not another parameter of the search space`,
    );
  }
  return { parameter, op: match[2] as '==' | '!=', value: parseValue(match[3]!) };
}

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * Checks and normalises a search space ({name: {type, min, max | values, condition}}); names become
 * snake_case like the job's parameters. Any problem: 400 INVALID_SEARCH_SPACE {parameter, reason}.
 */
export function parseSearchSpace(raw: Record<string, unknown>): SearchSpace {
  const entries = Object.entries(raw);
  if (entries.length === 0) throw invalidSpace('(none)', 'must name at least one parameter');
  if (entries.length > MAX_PARAMETERS)
    throw invalidSpace('(all)', `may name at most ${MAX_PARAMETERS} parameters`);
  const names = new Set(entries.map(([n]) => snakeCase(n)));
  if (names.size !== entries.length)
    throw invalidSpace('(all)', 'names the same parameter twice (camelCase and snake_case)');
  const space: SearchSpace = [];
  for (const [rawName, value] of entries) {
    const name = snakeCase(rawName);
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw invalidSpace(name, 'must be an object');
    const spec = value as Record<string, unknown>;
    const type = spec['type'];
    if (!(PARAMETER_TYPES as readonly unknown[]).includes(type)) {
      throw invalidSpace(name, `type must be one of ${PARAMETER_TYPES.join(', ')}`);
    }
    const condition =
      spec['condition'] === undefined || spec['condition'] === null
        ? null
        : typeof spec['condition'] === 'string'
          ? parseCondition(name, spec['condition'], names)
          : (() => {
              throw invalidSpace(name, 'condition must be a string');
            })();
    if (type === 'choice') {
      const values = spec['values'];
      if (!Array.isArray(values) || values.length === 0 || values.length > MAX_CHOICES) {
        throw invalidSpace(name, `values must be a non-empty array of at most ${MAX_CHOICES} values`);
      }
      if (values.some((v) => v !== null && !['string', 'number', 'boolean'].includes(typeof v))) {
        throw invalidSpace(name, 'values must be strings, numbers, booleans or null');
      }
      if (new Set(values.map((v) => JSON.stringify(v))).size !== values.length) {
        throw invalidSpace(name, 'values must not repeat');
      }
      space.push({ name, type, values: values as ParameterValue[], condition });
      continue;
    }
    const min = spec['min'];
    const max = spec['max'];
    if (!finite(min) || !finite(max)) throw invalidSpace(name, 'min and max must be numbers');
    if (min >= max) throw invalidSpace(name, 'min must be less than max');
    if ((type === 'log_uniform' || type === 'int_log_uniform') && min <= 0) {
      throw invalidSpace(name, 'a log scale needs min > 0');
    }
    if (
      (type === 'int_uniform' || type === 'int_log_uniform') &&
      (!Number.isInteger(min) || !Number.isInteger(max))
    ) {
      throw invalidSpace(name, 'an integer parameter needs integer min and max');
    }
    if (name === 'learning_rate' && (min < LEARNING_RATE_MIN || max > LEARNING_RATE_MAX)) {
      throw invalidSpace(
        name,
        `learning_rate must stay between ${LEARNING_RATE_MIN} and ${LEARNING_RATE_MAX}`,
      );
    }
    space.push({ name, type, min, max, condition } as ParameterSpec);
  }
  return space;
}

/** The values a grid walks for one parameter, or null when it is continuous. */
export function gridValues(spec: ParameterSpec): ParameterValue[] | null {
  if (spec.type === 'choice') return spec.values;
  if (spec.type === 'int_uniform' || spec.type === 'int_log_uniform') {
    const out: number[] = [];
    for (let v = spec.min; v <= spec.max && out.length <= MAX_GRID; v++) out.push(v);
    return out;
  }
  return null;
}

/** Grid needs finite values for every parameter: ALGORITHM_NOT_SUPPORTED names the continuous types. */
export function checkAlgorithm(algorithm: Algorithm, space: SearchSpace): void {
  if (algorithm !== 'grid') return;
  const continuous = [...new Set(space.filter((p) => gridValues(p) === null).map((p) => p.type))];
  if (continuous.length > 0) {
    throw new ApiError(
      'ALGORITHM_NOT_SUPPORTED',
      `grid search needs finite values; ${continuous.join(', ')} parameters are continuous (use choice, or random, bayesian, tpe)`,
      { algorithm, unsupportedParameterTypes: continuous },
    );
  }
  if (gridSize(space) > MAX_GRID) {
    throw invalidSpace('(all)', `the grid has more than ${MAX_GRID} points`);
  }
}

export function gridSize(space: SearchSpace): number {
  return space.reduce((n, p) => n * (gridValues(p)?.length ?? Number.POSITIVE_INFINITY), 1);
}

/** Parameters whose condition does not hold are left out (the base job's value stays). */
export function applyConditions(
  space: SearchSpace,
  values: Record<string, ParameterValue>,
): Record<string, ParameterValue> {
  const out: Record<string, ParameterValue> = {};
  for (const spec of space) {
    const c = spec.condition;
    const value = values[spec.name];
    if (value === undefined) continue;
    if (c) {
      const other = values[c.parameter];
      const holds = c.op === '==' ? other === c.value : other !== c.value;
      if (!holds) continue;
    }
    out[spec.name] = value;
  }
  return out;
}

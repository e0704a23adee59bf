import { ApiError } from '@anvil/shared';

/** Template rules a schema cannot state: semantic versions and resource bounds. Pure. */

export const TEMPLATE_CATEGORIES = ['ml', 'dev', 'production', 'custom'] as const;
export const TEMPLATE_FRAMEWORKS = ['pytorch', 'tensorflow', 'huggingface', 'sklearn'] as const;
export const SEMVER_PATTERN = '^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)$';

export type Semver = [number, number, number];

export function parseSemver(text: string): Semver | null {
  const match = new RegExp(SEMVER_PATTERN).exec(text);
  if (!match) return null;
  return [Number(match[1]), Number(match[2]), Number(match[3])];
}

/** Negative when a < b, 0 when equal, positive when a > b. */
export function compareSemver(a: string, b: string): number {
  const x = parseSemver(a) ?? [0, 0, 0];
  const y = parseSemver(b) ?? [0, 0, 0];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return 0;
}

/** The next patch version: what a PUT without `version` publishes. */
export function bumpPatch(version: string): string {
  const [major, minor, patch] = parseSemver(version) ?? [1, 0, 0];
  return `${major}.${minor}.${patch + 1}`;
}

export interface ResourceBounds {
  gpu_count?: number | undefined;
  cpu_cores?: number | undefined;
  memory_gb?: number | undefined;
  storage_gb?: number | undefined;
}

export const BOUND_FIELDS = ['gpu_count', 'cpu_cores', 'memory_gb', 'storage_gb'] as const;

export function validationError(
  field: string,
  reason: string,
  extra: Record<string, unknown> = {},
): ApiError {
  return new ApiError('VALIDATION_ERROR', `field "${field}" ${reason}`, { field, reason, ...extra });
}

/** min_resources <= max_resources, and the default configuration inside both. */
export function checkResourceBounds(
  defaults: ResourceBounds,
  min: ResourceBounds | null | undefined,
  max: ResourceBounds | null | undefined,
): void {
  for (const field of BOUND_FIELDS) {
    const low = min?.[field];
    const high = max?.[field];
    const value = defaults[field];
    if (low !== undefined && high !== undefined && low > high) {
      throw validationError(`min_resources.${field}`, `must not exceed max_resources.${field} (${high})`);
    }
    if (value !== undefined && low !== undefined && value < low) {
      throw validationError(
        `default_configuration.${field}`,
        `must be at least min_resources.${field} (${low})`,
      );
    }
    if (value !== undefined && high !== undefined && value > high) {
      throw validationError(
        `default_configuration.${field}`,
        `must be at most max_resources.${field} (${high})`,
      );
    }
  }
}

/**
 * Template fields Anvil stores for official templates but cannot act on for a customer's: packages are
 * not installed into clusters (they belong in docker_image), and templates are not shared across
 * accounts. Refused with 400 NOT_SUPPORTED naming the field rather than kept without effect.
 */
export function refuseInertFields(input: {
  required_packages?: string[] | undefined;
  is_public?: boolean | undefined;
}) {
  if (input.required_packages !== undefined && input.required_packages.length > 0) {
    throw new ApiError(
      'NOT_SUPPORTED',
      'required_packages is not supported: Anvil installs nothing into a cluster; put the packages in docker_image',
      { field: 'required_packages' },
    );
  }
  if (input.is_public === true) {
    throw new ApiError(
      'NOT_SUPPORTED',
      'is_public is not supported: a template is visible to its own account only (official templates to all)',
      { field: 'is_public' },
    );
  }
}

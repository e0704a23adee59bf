import { ApiError } from '@anvil/shared';

/** Field rules of cluster secrets that a schema cannot express. Pure, so they are tested alone. */

/** Mode of an injected file when `permissions.file_mode` is not given: readable by its owner only. */
export const DEFAULT_FILE_MODE = 0o400;

export interface StoredPermissions {
  read_only: boolean;
  allowed_users: string[];
  allowed_roles: string[];
  /** Numeric mode, 0-0o777. */
  file_mode: number;
}

export interface StoredRotationPolicy {
  enabled: boolean;
  rotation_interval_days: number | null;
  notification_days_before: number | null;
}

export interface RotationPolicyInput {
  enabled?: boolean | undefined;
  rotation_interval_days?: number | null | undefined;
  notification_days_before?: number | null | undefined;
}

function invalid(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `body field "${field}" ${reason}`, {
    field,
    reason,
    location: 'body',
  });
}

/** `"0400"`, `"400"` or `"0o400"` (octal text), or the number itself (256). Null when not a mode. */
export function parseFileMode(input: number | string): number | null {
  if (typeof input === 'number')
    return Number.isInteger(input) && input >= 0 && input <= 0o777 ? input : null;
  const match = /^(?:0o?)?([0-7]{1,3})$/.exec(input.trim());
  return match ? Number.parseInt(match[1]!, 8) : null;
}

/** Always four octal digits, as `ls` and `chmod` users read them: 256 → "0400". */
export function formatFileMode(mode: number): string {
  return `0${mode.toString(8).padStart(3, '0')}`;
}

/**
 * An absolute path, without `.` or `..` segments, empty segments or a trailing slash, and not `/`
 * itself; at most 255 bytes (the longest name a plain tar header carries).
 */
export function checkFilePath(path: string): string {
  if (!path.startsWith('/')) throw invalid('file_path', 'must be an absolute path');
  if (path.includes('\0')) throw invalid('file_path', 'must not contain NUL');
  const segments = path.slice(1).split('/');
  if (segments.some((s) => s === '..' || s === '.'))
    throw invalid('file_path', 'must not contain . or .. segments');
  if (segments.some((s) => s === ''))
    throw invalid('file_path', 'must name a file (no empty segments or trailing /)');
  if (Buffer.byteLength(path) > 255) throw invalid('file_path', 'must be at most 255 bytes');
  // Kernel file systems mounted over the image: a file cannot be put there before start.
  if (['proc', 'sys', 'dev'].includes(segments[0]!))
    throw invalid('file_path', 'must not be under /proc, /sys or /dev');
  return path;
}

/** Set by the agent from the cluster's GPU assignment; a secret may not widen or replace it. */
const RESERVED_ENV = new Set(['NVIDIA_VISIBLE_DEVICES']);

export function checkEnvName(name: string): string {
  if (RESERVED_ENV.has(name)) throw invalid('environment_variable', `${name} is set by Anvil itself`);
  return name;
}

/** A complete policy from a (partial) request and the current one; enabled needs an interval. */
export function validateRotationPolicy(
  input: RotationPolicyInput,
  current: StoredRotationPolicy | null = null,
): StoredRotationPolicy {
  const policy: StoredRotationPolicy = {
    enabled: input.enabled ?? current?.enabled ?? false,
    rotation_interval_days:
      input.rotation_interval_days === undefined
        ? (current?.rotation_interval_days ?? null)
        : input.rotation_interval_days,
    notification_days_before:
      input.notification_days_before === undefined
        ? (current?.notification_days_before ?? null)
        : input.notification_days_before,
  };
  if (policy.enabled && policy.rotation_interval_days === null) {
    throw invalid('rotation_policy.rotation_interval_days', 'is required when rotation is enabled');
  }
  if (
    policy.rotation_interval_days !== null &&
    policy.notification_days_before !== null &&
    policy.notification_days_before >= policy.rotation_interval_days
  ) {
    throw invalid('rotation_policy.notification_days_before', 'must be less than rotation_interval_days');
  }
  return policy;
}

const DAY_MS = 86_400_000;

/**
 * next_rotation = (last_rotation, or created_at before the first rotation) + rotation_interval_days;
 * null when rotation is not enabled.
 */
export function nextRotationOf(
  policy: StoredRotationPolicy | null,
  lastRotation: Date | null,
  createdAt: Date,
): Date | null {
  if (!policy?.enabled || policy.rotation_interval_days === null) return null;
  return new Date((lastRotation ?? createdAt).getTime() + policy.rotation_interval_days * DAY_MS);
}

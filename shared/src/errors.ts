/**
 * The error catalogue: every code the API answers with, and its HTTP status.
 * Codes and statuses come from the spec; where the spec leaves a status unnamed the choice is noted.
 */
export const ERROR_STATUS = {
  VALIDATION_ERROR: 400,
  INVALID_PARAMETERS: 400,
  INVALID_PERMISSION: 400,
  INVALID_SCOPE: 400,
  INVALID_EMAIL: 400,
  INVALID_PERIOD: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  INSUFFICIENT_PERMISSIONS: 403,
  NOT_FOUND: 404,
  API_KEY_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  BOOST_ALREADY_ACTIVE: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMITED: 429,
  RATE_LIMIT_EXCEEDED: 429,
  INTERNAL_ERROR: 500,
  SERVICE_UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** A failure the API reports to its caller: code from the catalogue, human message, structured details. */
export class ApiError extends Error {
  readonly status: number;
  /** Fields placed at the top level of a flat error body next to `details` (e.g. `required_permission`). */
  readonly extra: Record<string, unknown>;

  constructor(
    readonly code: ErrorCode | (string & {}),
    message: string,
    readonly details?: Record<string, unknown>,
    options: { status?: number; extra?: Record<string, unknown>; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = options.status ?? (ERROR_STATUS as Record<string, number>)[code] ?? 500;
    this.extra = options.extra ?? {};
    this.headers = options.headers ?? {};
  }

  readonly headers: Record<string, string>;
}

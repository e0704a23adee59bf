/**
 * Exit codes scripts can rely on (documented in `anvil --help` and the README). A refusal by the API maps
 * to a code by its HTTP status, so a script can tell "not there" from "not allowed" without parsing text.
 */
export const EXIT = {
  ok: 0,
  /** Anything else: a 5xx answer, an unexpected failure. */
  failure: 1,
  /** Bad command line: unknown command or option, missing or malformed argument. */
  usage: 2,
  /** No credentials (not logged in), or the key was refused (401). */
  unauthenticated: 3,
  /** The key or the member may not do this (403). */
  forbidden: 4,
  /** The resource does not exist, or is not visible to this account (404). */
  notFound: 5,
  /** The API refused the request as it stands: invalid input or state (400, 409, 413, 422 and other 4xx). */
  refused: 6,
  /** Rate limited (429): try again after the time the message names. */
  rateLimited: 7,
  /** The control plane could not be reached (connection refused, DNS, TLS, timeout). */
  unreachable: 8,
  /** The work ran and failed: a job that ended FAILED, CANCELLED or TIMED_OUT, an upload the server rejected. */
  jobFailed: 9,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export function exitCodeForStatus(status: number): ExitCode {
  if (status === 401) return EXIT.unauthenticated;
  if (status === 403) return EXIT.forbidden;
  if (status === 404) return EXIT.notFound;
  if (status === 429) return EXIT.rateLimited;
  if (status >= 400 && status < 500) return EXIT.refused;
  return EXIT.failure;
}

/** A failure the CLI reports as one line on stderr (never a stack trace) and exits with `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: ExitCode,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
    this.name = 'UsageError';
  }
}

/** The API answered an error: its status, code (VALIDATION_ERROR…), message and request id. */
export class ApiFailure extends CliError {
  constructor(
    readonly status: number,
    readonly code: string | null,
    readonly apiMessage: string,
    readonly requestId: string | null,
    readonly details: Record<string, unknown> | null,
  ) {
    super(ApiFailure.describe(status, code, apiMessage, requestId), exitCodeForStatus(status));
    this.name = 'ApiFailure';
  }

  static describe(status: number, code: string | null, message: string, requestId: string | null): string {
    const what = [code, `HTTP ${status}`, requestId ? `request ${requestId}` : null].filter(Boolean);
    return `${message} (${what.join(', ')})`;
  }
}

/** Prefix an error with what was being done ("create container: ..."), keeping the original as cause. */
export function wrapError(context: string, err: unknown): Error {
  const message = err instanceof Error ? err.message : String(err);
  return new Error(`${context}: ${message}`, { cause: err });
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The control plane refused this agent in a way redialling cannot fix (bad join token, revoked
 * credential, incompatible protocol). main.ts prints the message as one line and exits non-zero.
 */
export class FatalAgentError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
    this.name = 'FatalAgentError';
  }
}

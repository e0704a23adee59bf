import { WORKLOAD_SECRET_LOG_PATHS } from '@anvil/shared/protocol';
import { type DestinationStream, type Logger, pino } from 'pino';

export type { Logger };

/**
 * Structured JSON logs on stdout; the host id is bound with `logger.child({ hostId })` once known.
 * Secret env and file contents of workload specs are redacted, should a spec ever be logged.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      name: 'anvil-agent',
      level,
      base: { pid: process.pid },
      redact: {
        paths: [...WORKLOAD_SECRET_LOG_PATHS],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

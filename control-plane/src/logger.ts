import pino, { type Logger } from 'pino';
import type { LogLevel } from './config.ts';

/** JSON logs; secrets that might appear in request logs are redacted at the source. */
export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'anvil-control-plane' },
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers.cookie',
          '*.value',
          '*.password',
          // Cluster secrets on their way to an agent (contract 5), should a spec or message ever be logged.
          '*.secretEnv',
          '*.files[*].contentBase64',
          '*.workloads[*].secretEnv',
          '*.workloads[*].files[*].contentBase64',
          // Registry credentials of a pull (WorkloadSpec.registryAuth).
          '*.registryAuth',
          '*.workloads[*].registryAuth',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

import { WORKLOAD_SECRET_LOG_PATHS } from '@anvil/shared/protocol';
import pino from 'pino';

/**
 * The one logger type of the control plane: what its modules need of a logger. The process's pino
 * logger and its children satisfy it (so does fastify's `app.log`), and so does `silentLogger`. Every
 * module is handed its logger at construction (a child of the root, bound to its component).
 */
export interface Logger {
  debug(details: object, message: string): void;
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
  child(bindings: Record<string, unknown>): Logger;
}

/** Logs nothing: the default of modules built without a logger (tests, tools). */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child: () => silentLogger,
};

/** JSON logs; secrets that might appear in request logs are redacted at the source. */
export function createLogger(level: pino.LevelWithSilent, destination?: pino.DestinationStream): pino.Logger {
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
          // Cluster secrets and registry credentials on their way to an agent (contract 5).
          ...WORKLOAD_SECRET_LOG_PATHS,
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

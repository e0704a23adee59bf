import { type Logger, pino } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout; the host id is bound with `logger.child({ hostId })` once known. */
export function createLogger(level: string): Logger {
  return pino({ name: 'anvil-agent', level, base: { pid: process.pid } });
}

import { Writable } from 'node:stream';
import type pino from 'pino';
import { createLogger } from '../logger.ts';

/** A real pino logger at `level` whose records a test reads back, parsed, in the order written. */
export function capturedLogger(level: pino.LevelWithSilent): {
  logger: pino.Logger;
  lines: Record<string, unknown>[];
} {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: createLogger(level, sink), lines };
}

import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions, LevelWithSilentOrString, LogFn } from 'pino';

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * The per-request logger (`request.log`) with the request id bound, made when the request first logs.
 * Fastify builds a pino child for every request, which costs a few µs (bindings serialised, redaction
 * set up); most requests log nothing at the configured level, so the child is built only when a line at
 * an enabled level is written, a level is set, or a child of it is asked for. Lines are the same as the
 * eager child's.
 */
export class DeferredRequestLogger implements FastifyBaseLogger {
  private made: FastifyBaseLogger | null = null;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  private logger(): FastifyBaseLogger {
    this.made ??= this.parent.child(this.bindings, this.options);
    return this.made;
  }

  get level(): LevelWithSilentOrString {
    return this.made ? this.made.level : this.parent.level;
  }

  set level(level: LevelWithSilentOrString) {
    this.logger().level = level;
  }

  private write(level: Level, args: Parameters<LogFn>): void {
    if (this.made) this.made[level](...args);
    else if (enabled(this.parent, level)) this.logger()[level](...args);
  }

  fatal(...args: Parameters<LogFn>): void {
    this.write('fatal', args);
  }
  error(...args: Parameters<LogFn>): void {
    this.write('error', args);
  }
  warn(...args: Parameters<LogFn>): void {
    this.write('warn', args);
  }
  info(...args: Parameters<LogFn>): void {
    this.write('info', args);
  }
  debug(...args: Parameters<LogFn>): void {
    this.write('debug', args);
  }
  trace(...args: Parameters<LogFn>): void {
    this.write('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger().child(bindings, options);
  }
}

/** Whether the parent writes `level`: pino answers isLevelEnabled; other loggers are asked to try. */
function enabled(parent: FastifyBaseLogger, level: Level): boolean {
  const check = (parent as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled;
  return check ? check.call(parent, level) : true;
}

/** Fastify's childLoggerFactory: a child that is made only if the request logs. */
export function deferredChildLogger(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  // A route with its own log level needs the child at once (its level differs from the parent's).
  if (options.level !== undefined) return logger.child(bindings, options);
  return new DeferredRequestLogger(logger, bindings, options);
}

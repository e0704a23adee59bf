import type { LogLevel } from './log-query.ts';

/**
 * The rule that gives a stored container line (stdout/stderr, as the agent ships it) the spec's log
 * fields. Nothing is guessed beyond it:
 *
 * - level: the first of these that the line carries, normalised — a JSON field `"level"`, `"severity"`
 *   or `"lvl"`; a logfmt `level=`; a leading level word, optionally in brackets (`[WARN] ...`,
 *   `ERROR: ...`). trace/debug → debug; info/notice → info; warn/warning → warn; error/err → error;
 *   fatal/critical/crit/panic/emerg/alert → fatal. A line with none of these (or an unknown word) is
 *   `error` on stderr and `info` on stdout (as Cloud Logging and other platforms treat the streams).
 * - source: `container` (every stored line is the container's output).
 * - log_type: `application` (the spec's application type is stdout and stderr). The `error` log type
 *   is a filter: application lines at level error or fatal. system, audit, docker and gpu logs are not
 *   collected by the agent, so those filters match nothing.
 *
 * The level is computed in SQL (`LEVEL_SQL`) so that filters, counts and pagination agree with what is
 * returned. PostgreSQL ARE regular expressions; `(?i)` makes them case-insensitive.
 */
const WORD = 'trace|debug|info|notice|warn|warning|error|err|fatal|critical|crit|panic|emerg|alert';

const MAPPING: Record<string, LogLevel> = {
  trace: 'debug',
  debug: 'debug',
  info: 'info',
  notice: 'info',
  warn: 'warn',
  warning: 'warn',
  error: 'error',
  err: 'error',
  fatal: 'fatal',
  critical: 'fatal',
  crit: 'fatal',
  panic: 'fatal',
  emerg: 'fatal',
  alert: 'fatal',
};

/** SQL text for the level of a row of log_entries (columns `line` and `stream`). A constant. */
export const LEVEL_SQL = `(CASE lower(coalesce(
    substring(line from '(?i)"(?:level|severity|lvl)"\\s*:\\s*"([a-z]+)"'),
    substring(line from '(?i)\\mlevel=([a-z]+)'),
    substring(line from '(?i)^\\s*[\\[(<]?(${WORD})\\M')))
  ${Object.entries(MAPPING)
    .map(([word, level]) => `WHEN '${word}' THEN '${level}'`)
    .join(' ')}
  ELSE CASE WHEN stream = 'stderr' THEN 'error' ELSE 'info' END END)`;

export const LOG_SOURCE = 'container' as const;
export const LOG_TYPE = 'application' as const;

/** The rule above, for OpenAPI descriptions. */
export const LEVEL_RULE_DESCRIPTION =
  "Log fields: the stored lines are the container's stdout and stderr, so source = container and log_type = " +
  'application; the log_type filter error selects application lines at level error or fatal, and system, ' +
  'audit, docker and gpu select nothing (not collected). level = the first the line carries: a JSON field ' +
  '"level"/"severity"/"lvl", a logfmt level=, or a leading level word (optionally in brackets, e.g. [WARN] or ' +
  'ERROR:), mapped trace/debug → debug, info/notice → info, warn/warning → warn, error/err → error, ' +
  'fatal/critical/crit/panic/emerg/alert → fatal; otherwise error for stderr and info for stdout. ' +
  "id = the line's sequence number; metadata.stream and tags name the stream; process and stack_trace are null.";

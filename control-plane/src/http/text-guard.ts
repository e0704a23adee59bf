import { ApiError } from '@anvil/shared';
import type { FastifyInstance, FastifyRequest } from 'fastify';

/**
 * Text that no part of Anvil can store or pass on is refused at the edge, before authentication looks
 * anything up: PostgreSQL refuses NUL in text (it reached the database as a 500 before), and a lone
 * UTF-16 surrogate has no UTF-8 encoding (JSON `"\ud800"` parses to one). Every path parameter, query
 * value and JSON body string (object keys included) is checked; the answer is 400 VALIDATION_ERROR
 * naming the field, and nothing else runs.
 */

export interface TextProblem {
  /** Dotted path of the offending value inside its part (`name`, `tags.2`, `metadata.key`). */
  field: string;
  reason: string;
}

const MAX_DEPTH = 64;
// A high surrogate not followed by a low one, or a low one not preceded by a high one.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The reason a string cannot be accepted, or null when it is fine. */
export function textProblem(value: string): string | null {
  if (value.includes('\u0000')) return 'contains a NUL character';
  if (LONE_SURROGATE.test(value)) return 'is not valid Unicode (unpaired surrogate)';
  return null;
}

/** The first string in a parsed value (strings, arrays, plain objects and their keys) that is refused. */
export function findBadText(value: unknown, field = '', depth = 0): TextProblem | null {
  if (typeof value === 'string') {
    const reason = textProblem(value);
    return reason ? { field, reason } : null;
  }
  if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findBadText(value[i], field ? `${field}.${i}` : String(i), depth + 1);
      if (found) return found;
    }
    return null;
  }
  // Bodies that are streams or buffers (uploads) are bytes, not text. (Parsed query strings are objects
  // with their own prototype, so the shape is tested rather than the prototype.)
  if (ArrayBuffer.isView(value) || typeof (value as { pipe?: unknown }).pipe === 'function') return null;
  for (const [key, inner] of Object.entries(value)) {
    const path = field ? `${field}.${key}` : key;
    const keyReason = textProblem(key);
    if (keyReason) return { field: path, reason: `has a key that ${keyReason}` };
    const found = findBadText(inner, path, depth + 1);
    if (found) return found;
  }
  return null;
}

function refuse(location: string, problem: TextProblem): ApiError {
  const field = problem.field || location;
  return new ApiError('VALIDATION_ERROR', `${location} field "${field}" ${problem.reason}`, {
    field,
    reason: problem.reason,
    location,
  });
}

/**
 * The raw path: percent-escapes that do not decode to UTF-8 (`%ff`, an encoded surrogate) are refused
 * here too, since the router would otherwise pass them on undecoded.
 */
function pathProblem(url: string): TextProblem | null {
  const path = url.split('?')[0] ?? '';
  for (const segment of path.split('/')) {
    if (!segment.includes('%')) continue;
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return { field: 'path', reason: 'has a malformed percent-escape or invalid UTF-8' };
    }
    const reason = textProblem(decoded);
    if (reason) return { field: 'path', reason };
  }
  return null;
}

/**
 * The raw query: the query parser keeps an escape it cannot decode (`%ED%A0%80`, an encoded surrogate)
 * as literal text, so those are found here, by name.
 */
function queryProblem(url: string): TextProblem | null {
  const at = url.indexOf('?');
  if (at === -1) return null;
  for (const pair of url.slice(at + 1).split('&')) {
    if (!pair.includes('%')) continue;
    const [name = '', value = ''] = pair.split('=', 2);
    for (const part of [name, value]) {
      try {
        decodeURIComponent(part.replaceAll('+', ' '));
      } catch {
        return { field: safeName(name), reason: 'has a malformed percent-escape or invalid UTF-8' };
      }
    }
  }
  return null;
}

/** A parameter name fit to be shown in an error (its own escapes may be what is wrong). */
function safeName(raw: string): string {
  try {
    const decoded = decodeURIComponent(raw.replaceAll('+', ' '));
    return textProblem(decoded) ? raw : decoded;
  } catch {
    return raw;
  }
}

function checkRequestLine(request: FastifyRequest): ApiError | null {
  const params = findBadText(request.params);
  if (params) return refuse('params', params);
  const path = pathProblem(request.url);
  if (path) return refuse('params', path);
  const query = findBadText(request.query) ?? queryProblem(request.url);
  if (query) return refuse('querystring', query);
  return null;
}

/** Installs the checks: path and query on request (first of all hooks), bodies once parsed. */
export function installTextGuard(app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    const problem = checkRequestLine(request);
    done(problem ?? undefined);
  });
  app.addHook('preValidation', (request, _reply, done) => {
    const problem = findBadText(request.body);
    done(problem ? refuse('body', problem) : undefined);
  });
}

/**
 * The boolean log query language of POST /v1/clusters/{id}/logs/search, e.g.
 * `level:error AND ("out of memory" OR oom) NOT stream:stdout`.
 *
 * Grammar (NOT binds tighter than AND, AND tighter than OR; two terms side by side mean AND):
 *
 *   query   := or EOF
 *   or      := and ( "OR" and )*
 *   and     := unary ( "AND"? unary )*
 *   unary   := "NOT" unary | primary
 *   primary := "(" or ")" | term
 *   term    := FIELD ":" value | value
 *   value   := WORD | "quoted phrase"
 *
 * AND, OR and NOT are operators only in capitals; `and` is a search word. A bare word or phrase is a
 * case-insensitive substring of the message. Inside quotes, `\"` and `\\` escape. The query becomes an
 * AST, and the AST a SQL condition whose every value is a bound parameter: no input text ever reaches
 * the SQL string.
 */

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'fatal'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_SOURCES = ['container', 'host', 'gpu_driver', 'application'] as const;
export const LOG_TYPES = ['system', 'application', 'error', 'audit', 'docker', 'gpu'] as const;
export const LOG_STREAMS = ['stdout', 'stderr'] as const;

/** Fields a `field:value` term may name; aliases map to the canonical name. */
const FIELDS = {
  level: 'level',
  source: 'source',
  log_type: 'log_type',
  type: 'log_type',
  stream: 'stream',
  message: 'message',
  msg: 'message',
  container_id: 'container_id',
} as const;
export type LogField = (typeof FIELDS)[keyof typeof FIELDS];

export const MAX_QUERY_LENGTH = 2_000;
const MAX_DEPTH = 32;
const MAX_TERMS = 100;

export type LogQueryNode =
  | { type: 'and' | 'or'; left: LogQueryNode; right: LogQueryNode }
  | { type: 'not'; operand: LogQueryNode }
  | { type: 'term'; field: LogField | null; value: string; quoted: boolean; position: number };

/** A query that does not parse; `position` is the 0-based character offset of the problem. */
export class LogQuerySyntaxError extends Error {
  constructor(
    readonly reason: string,
    readonly position: number,
  ) {
    super(`${reason} at position ${position}`);
    this.name = 'LogQuerySyntaxError';
  }
}

type TokenType = 'word' | 'phrase' | 'colon' | 'lparen' | 'rparen' | 'and' | 'or' | 'not' | 'eof';
interface Token {
  type: TokenType;
  text: string;
  position: number;
  /** True when no whitespace separates this token from the previous one. */
  attached: boolean;
}

const SPECIAL = new Set(['(', ')', '"', ':']);
const isSpace = (c: string) => c === ' ' || c === '\t' || c === '\n' || c === '\r';

export function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let attached = false;
  while (i < input.length) {
    const c = input[i]!;
    if (isSpace(c)) {
      i += 1;
      attached = false;
      continue;
    }
    const start = i;
    if (c === '(' || c === ')' || c === ':') {
      tokens.push({
        type: c === '(' ? 'lparen' : c === ')' ? 'rparen' : 'colon',
        text: c,
        position: i,
        attached,
      });
      i += 1;
    } else if (c === '"') {
      let text = '';
      i += 1;
      for (;;) {
        if (i >= input.length) throw new LogQuerySyntaxError('unterminated quoted phrase', start);
        const d = input[i]!;
        if (d === '\\' && i + 1 < input.length) {
          text += input[i + 1];
          i += 2;
        } else if (d === '"') {
          i += 1;
          break;
        } else {
          text += d;
          i += 1;
        }
      }
      tokens.push({ type: 'phrase', text, position: start, attached });
    } else {
      while (i < input.length && !isSpace(input[i]!) && !SPECIAL.has(input[i]!)) i += 1;
      const text = input.slice(start, i);
      const type = text === 'AND' ? 'and' : text === 'OR' ? 'or' : text === 'NOT' ? 'not' : 'word';
      tokens.push({ type, text, position: start, attached });
    }
    attached = true;
  }
  tokens.push({ type: 'eof', text: '', position: input.length, attached: false });
  return tokens;
}

class Parser {
  #i = 0;
  #terms = 0;
  constructor(private readonly tokens: Token[]) {}

  get #peek(): Token {
    return this.tokens[this.#i]!;
  }

  #next(): Token {
    const token = this.tokens[this.#i]!;
    if (token.type !== 'eof') this.#i += 1;
    return token;
  }

  parse(): LogQueryNode {
    if (this.#peek.type === 'eof') throw new LogQuerySyntaxError('empty query', 0);
    const node = this.#or(0);
    const rest = this.#peek;
    if (rest.type !== 'eof') {
      throw new LogQuerySyntaxError(
        rest.type === 'rparen' ? 'unmatched ")"' : `unexpected ${describe(rest)}`,
        rest.position,
      );
    }
    return node;
  }

  #or(depth: number): LogQueryNode {
    let left = this.#and(depth);
    while (this.#peek.type === 'or') {
      this.#next();
      left = { type: 'or', left, right: this.#and(depth) };
    }
    return left;
  }

  #and(depth: number): LogQueryNode {
    let left = this.#unary(depth);
    for (;;) {
      const t = this.#peek.type;
      if (t === 'and') {
        this.#next();
      } else if (t !== 'word' && t !== 'phrase' && t !== 'lparen' && t !== 'not') {
        return left;
      }
      left = { type: 'and', left, right: this.#unary(depth) };
    }
  }

  #unary(depth: number): LogQueryNode {
    if (depth > MAX_DEPTH)
      throw new LogQuerySyntaxError(`nesting deeper than ${MAX_DEPTH}`, this.#peek.position);
    if (this.#peek.type === 'not') {
      this.#next();
      return { type: 'not', operand: this.#unary(depth + 1) };
    }
    return this.#primary(depth);
  }

  #primary(depth: number): LogQueryNode {
    const token = this.#next();
    switch (token.type) {
      case 'lparen': {
        if (this.#peek.type === 'rparen')
          throw new LogQuerySyntaxError('empty parentheses', this.#peek.position);
        const inner = this.#or(depth + 1);
        const close = this.#next();
        if (close.type !== 'rparen') {
          throw new LogQuerySyntaxError(
            `expected ")" to close "(" at position ${token.position}`,
            close.position,
          );
        }
        return inner;
      }
      case 'word':
        if (this.#peek.type === 'colon' && this.#peek.attached) return this.#fieldTerm(token);
        return this.#term(null, token);
      case 'phrase':
        return this.#term(null, token);
      case 'colon':
        throw new LogQuerySyntaxError('":" without a field name before it', token.position);
      default:
        throw new LogQuerySyntaxError(`expected a term, found ${describe(token)}`, token.position);
    }
  }

  #fieldTerm(name: Token): LogQueryNode {
    const field = (FIELDS as Record<string, LogField>)[name.text.toLowerCase()];
    if (!field) {
      throw new LogQuerySyntaxError(
        `unknown field "${name.text}" (fields: ${Object.keys(FIELDS).join(', ')}; quote text that contains ":")`,
        name.position,
      );
    }
    this.#next();
    const value = this.#next();
    if ((value.type !== 'word' && value.type !== 'phrase') || !value.attached) {
      throw new LogQuerySyntaxError(`expected a value after "${name.text}:"`, value.position);
    }
    if (this.#peek.type === 'colon' && this.#peek.attached) {
      throw new LogQuerySyntaxError('unexpected ":" (quote values that contain ":")', this.#peek.position);
    }
    checkValue(field, value);
    return this.#term(field, value);
  }

  #term(field: LogField | null, token: Token): LogQueryNode {
    this.#terms += 1;
    if (this.#terms > MAX_TERMS)
      throw new LogQuerySyntaxError(`more than ${MAX_TERMS} terms`, token.position);
    if (token.type === 'phrase' && token.text.length === 0) {
      throw new LogQuerySyntaxError('empty quoted phrase', token.position);
    }
    return {
      type: 'term',
      field,
      value: token.text,
      quoted: token.type === 'phrase',
      position: token.position,
    };
  }
}

function checkValue(field: LogField, value: Token): void {
  const allowed: Partial<Record<LogField, readonly string[]>> = {
    level: LOG_LEVELS,
    source: LOG_SOURCES,
    log_type: LOG_TYPES,
    stream: LOG_STREAMS,
  };
  const list = allowed[field];
  if (list && !list.includes(value.text.toLowerCase())) {
    throw new LogQuerySyntaxError(
      `${field} must be one of ${list.join(', ')}, not "${value.text}"`,
      value.position,
    );
  }
}

function describe(token: Token): string {
  if (token.type === 'eof') return 'end of query';
  if (token.type === 'phrase') return 'a quoted phrase';
  return `"${token.text}"`;
}

export function parseLogQuery(input: string): LogQueryNode {
  if (input.length > MAX_QUERY_LENGTH) {
    throw new LogQuerySyntaxError(`query longer than ${MAX_QUERY_LENGTH} characters`, MAX_QUERY_LENGTH);
  }
  return new Parser(tokenize(input)).parse();
}

/** Collects bound parameters; `add` answers the placeholder ($n) to put in the SQL text. */
export class SqlParams {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/** `%text%` for ILIKE, with the pattern characters of the text escaped (backslash is LIKE's escape). */
export function containsPattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * Column expressions the compiled condition refers to. They are constants of the caller, never input.
 * `level` is the SQL expression deriving a line's level (see levels.ts).
 */
export interface LogColumns {
  level: string;
  stream: string;
  message: string;
  containerId: string;
}

/** The AST as a SQL boolean expression; every value goes through `params`. */
export function compileLogQuery(node: LogQueryNode, columns: LogColumns, params: SqlParams): string {
  switch (node.type) {
    case 'and':
      return `(${compileLogQuery(node.left, columns, params)} AND ${compileLogQuery(node.right, columns, params)})`;
    case 'or':
      return `(${compileLogQuery(node.left, columns, params)} OR ${compileLogQuery(node.right, columns, params)})`;
    case 'not':
      return `(NOT ${compileLogQuery(node.operand, columns, params)})`;
    case 'term':
      return compileTerm(node, columns, params);
  }
}

function compileTerm(
  node: Extract<LogQueryNode, { type: 'term' }>,
  columns: LogColumns,
  params: SqlParams,
): string {
  const value = node.value.toLowerCase();
  switch (node.field) {
    case null:
    case 'message':
      return `(${columns.message} ILIKE ${params.add(containsPattern(node.value))})`;
    case 'level':
      return `(${columns.level} = ${params.add(value)})`;
    case 'stream':
      return `(${columns.stream} = ${params.add(value)})`;
    case 'container_id':
      // Docker ids are often shortened: a prefix matches, as `docker logs` accepts.
      return `(${columns.containerId} LIKE ${params.add(`${node.value.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)})`;
    case 'source':
      return sourceCondition(value);
    case 'log_type':
      return logTypeCondition(value, columns, params);
  }
}

/** Every stored line is container output (levels.ts): `source:container` matches all, others none. */
export function sourceCondition(source: string): string {
  return source === 'container' ? 'TRUE' : 'FALSE';
}

/**
 * Stored lines are the application's stdout and stderr (log type `application`); `error` is the view
 * of those at level error or fatal; system, audit, docker and gpu logs are not collected and match none.
 */
export function logTypeCondition(
  logType: string,
  columns: Pick<LogColumns, 'level'>,
  params: SqlParams,
): string {
  if (logType === 'application') return 'TRUE';
  if (logType === 'error') return `(${columns.level} IN (${params.add('error')}, ${params.add('fatal')}))`;
  return 'FALSE';
}

/** Words and phrases of a parsed query that search the message (for query_info.search_terms). */
export function searchTerms(node: LogQueryNode): string[] {
  switch (node.type) {
    case 'and':
    case 'or':
      return [...searchTerms(node.left), ...searchTerms(node.right)];
    case 'not':
      return [];
    case 'term':
      return node.field === null || node.field === 'message' ? [node.value] : [];
  }
}

/** Field names a parsed query filters on (for query_info.filters_applied). */
export function queryFields(node: LogQueryNode): string[] {
  switch (node.type) {
    case 'and':
    case 'or':
      return [...new Set([...queryFields(node.left), ...queryFields(node.right)])];
    case 'not':
      return queryFields(node.operand);
    case 'term':
      return [node.field ?? 'message'];
  }
}

import { describe, expect, it } from 'vitest';
import {
  compileLogQuery,
  type LogColumns,
  LogQuerySyntaxError,
  parseLogQuery,
  queryFields,
  SqlParams,
  searchTerms,
  tokenize,
} from './log-query.ts';

const COLUMNS: LogColumns = { level: 'LVL', stream: 'stream', message: 'line', containerId: 'container_id' };

/** The AST in a compact prefix form, to compare shapes. */
function show(query: string): string {
  const walk = (n: ReturnType<typeof parseLogQuery>): string => {
    switch (n.type) {
      case 'and':
      case 'or':
        return `${n.type.toUpperCase()}(${walk(n.left)}, ${walk(n.right)})`;
      case 'not':
        return `NOT(${walk(n.operand)})`;
      case 'term':
        return `${n.field ?? '*'}=${n.quoted ? `"${n.value}"` : n.value}`;
    }
  };
  return walk(parseLogQuery(query));
}

function compile(query: string) {
  const params = new SqlParams();
  const sql = compileLogQuery(parseLogQuery(query), COLUMNS, params);
  return { sql, values: params.values };
}

function syntaxError(query: string): LogQuerySyntaxError {
  try {
    parseLogQuery(query);
  } catch (error) {
    if (error instanceof LogQuerySyntaxError) return error;
    throw error;
  }
  throw new Error(`"${query}" parsed`);
}

describe('log query parser', () => {
  it('parses fields, words, phrases and the operators with NOT > AND > OR precedence', () => {
    expect(show('level:error')).toBe('level=error');
    expect(show('level:error AND (timeout OR "out of memory")')).toBe(
      'AND(level=error, OR(*=timeout, *="out of memory"))',
    );
    expect(show('a OR b AND c')).toBe('OR(*=a, AND(*=b, *=c))');
    expect(show('a b')).toBe('AND(*=a, *=b)');
    expect(show('NOT a AND b')).toBe('AND(NOT(*=a), *=b)');
    expect(show('NOT NOT a')).toBe('NOT(NOT(*=a))');
    expect(show('a NOT stream:stdout')).toBe('AND(*=a, NOT(stream=stdout))');
    expect(show('((a))')).toBe('*=a');
    expect(show('(a OR b) (c OR d)')).toBe('AND(OR(*=a, *=b), OR(*=c, *=d))');
    expect(show('message:"disk full" type:error')).toBe('AND(message="disk full", log_type=error)');
    expect(show('a and b')).toBe('AND(AND(*=a, *=and), *=b)');
    expect(show('"say \\"hi\\""')).toBe('*="say "hi""');
    expect(show('level:ERROR')).toBe('level=ERROR');
  });

  it('records positions in tokens', () => {
    expect(tokenize('level:error OR x').map((t) => [t.type, t.position])).toEqual([
      ['word', 0],
      ['colon', 5],
      ['word', 6],
      ['or', 12],
      ['word', 15],
      ['eof', 16],
    ]);
  });

  it.each([
    ['', 'empty query', 0],
    ['   ', 'empty query', 0],
    ['level:error AND', 'expected a term, found end of query', 15],
    ['(a OR b', 'expected ")" to close "(" at position 0', 7],
    ['a OR b)', 'unmatched ")"', 6],
    ['()', 'empty parentheses', 1],
    ['"open', 'unterminated quoted phrase', 0],
    ['AND a', 'expected a term, found "AND"', 0],
    ['a OR OR b', 'expected a term, found "OR"', 5],
    ['colour:red', 'unknown field "colour"', 0],
    ['level:', 'expected a value after "level:"', 6],
    ['level: error', 'expected a value after "level:"', 7],
    [':x', '":" without a field name before it', 0],
    ['level:loud', 'level must be one of debug, info, warn, error, fatal, not "loud"', 6],
    ['stream:tty', 'stream must be one of stdout, stderr', 7],
    ['message:a:b', 'unexpected ":"', 9],
    ['""', 'empty quoted phrase', 0],
    ['NOT', 'expected a term, found end of query', 3],
  ])('rejects %j with a reason and a position', (query, reason, position) => {
    const error = syntaxError(query);
    expect(error.reason).toContain(reason);
    expect(error.position).toBe(position);
    expect(error.message).toContain(`at position ${position}`);
  });

  it('bounds nesting, length and the number of terms', () => {
    expect(syntaxError(`${'('.repeat(40)}a${')'.repeat(40)}`).reason).toContain('nesting deeper');
    expect(syntaxError(`${'NOT '.repeat(40)}a`).reason).toContain('nesting deeper');
    expect(syntaxError('a '.repeat(101)).reason).toContain('more than 100 terms');
    expect(syntaxError('x'.repeat(2001)).reason).toContain('longer than 2000');
  });

  it('compiles to SQL with every value bound, never in the text', () => {
    expect(compile('level:error AND (timeout OR "out of memory") NOT stream:stdout')).toEqual({
      sql: '(((LVL = $1) AND ((line ILIKE $2) OR (line ILIKE $3))) AND (NOT (stream = $4)))',
      values: ['error', '%timeout%', '%out of memory%', 'stdout'],
    });
    expect(compile('container_id:abc123')).toEqual({
      sql: '(container_id LIKE $1)',
      values: ['abc123%'],
    });
    expect(compile('log_type:error')).toEqual({ sql: '(LVL IN ($1, $2))', values: ['error', 'fatal'] });
    expect(compile('source:container OR log_type:audit')).toEqual({ sql: '(TRUE OR FALSE)', values: [] });
  });

  it('keeps injection attempts inside bound parameters', () => {
    const attempts = [
      "'; DROP TABLE log_entries; --",
      '"\') OR 1=1 --"',
      "message:\"x' OR '1'='1\"",
      '"$1" OR "%" OR "_" OR "\\\\"',
      'container_id:"a%\' UNION SELECT"',
    ];
    for (const attempt of attempts) {
      const { sql, values } = compile(attempt);
      // The SQL text contains only placeholders, operators and constant column names.
      expect(sql).toMatch(/^[()$0-9 A-Za-z_,]*$/);
      expect(sql).not.toMatch(/DROP|UNION|SELECT|1=1|'/);
      expect(values.length).toBeGreaterThan(0);
    }
    // LIKE wildcards in the input are escaped: "%" searches for a literal percent sign.
    expect(compile('"100%_done\\\\"').values).toEqual(['%100\\%\\_done\\\\%']);
  });

  it('lists search terms and fields for query_info', () => {
    const node = parseLogQuery('level:error AND (oom OR "disk full") NOT secret');
    expect(searchTerms(node)).toEqual(['oom', 'disk full']);
    expect(queryFields(node)).toEqual(['level', 'message']);
  });
});

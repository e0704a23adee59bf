import type { PGlite } from '@electric-sql/pglite';

/**
 * Named statements on PGlite, as the `name` of Sql.query asks: prepared once with `PREPARE`, then run with
 * `EXECUTE` over the simple protocol. PGlite plans every extended-protocol statement anew in the API's
 * own thread, and parses, describes, binds and executes it in five calls into the engine: a join that
 * plans in several milliseconds costs that on every call. A prepared statement is planned once (a generic
 * plan once PostgreSQL finds it no worse than the custom ones) and runs in one call. `EXECUTE` takes no
 * bind parameters, so the values go in as SQL literals, quoted here; each is an untyped literal that the
 * statement's inferred parameter type reads, as a bound text parameter would be.
 */
export class PglitePrepared {
  /** Names prepared in this session (a DISCARD ALL or another opener may change it: see run()). */
  readonly #prepared = new Set<string>();

  constructor(private readonly client: PGlite) {}

  async run<T>(name: string, text: string, params: unknown[]): Promise<T[]> {
    if (!SAFE_NAME.test(name))
      throw new Error(`statement name ${JSON.stringify(name)} is not a plain identifier`);
    const execute = `EXECUTE ${name}${params.length > 0 ? `(${params.map(sqlLiteral).join(', ')})` : ''}`;
    if (!this.#prepared.has(name)) await this.#prepare(name, text);
    try {
      return await this.#execute<T>(execute);
    } catch (error) {
      // The session lost it (a pooled test database runs DISCARD ALL between tests): prepare again.
      if (codeOf(error) !== INVALID_STATEMENT_NAME) throw error;
      this.#prepared.delete(name);
      await this.#prepare(name, text);
      return this.#execute<T>(execute);
    }
  }

  async #prepare(name: string, text: string): Promise<void> {
    try {
      await this.client.exec(`PREPARE ${name} AS ${text}`);
    } catch (error) {
      // Prepared by another opener of the same session: a name always goes with the same text.
      if (codeOf(error) !== DUPLICATE_STATEMENT) throw error;
    }
    this.#prepared.add(name);
  }

  async #execute<T>(execute: string): Promise<T[]> {
    const results = await this.client.exec(execute);
    return (results.at(-1)?.rows ?? []) as T[];
  }
}

const SAFE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
const INVALID_STATEMENT_NAME = '26000';
const DUPLICATE_STATEMENT = '42P05';

function codeOf(error: unknown): string | undefined {
  return (error as { code?: string } | null)?.code;
}

/**
 * A parameter as an SQL literal, with node-postgres's reading of JavaScript values (Date as an ISO
 * timestamp, arrays as PostgreSQL arrays, Buffers as bytea, other objects as JSON). Quotes are doubled;
 * with standard_conforming_strings (on since PostgreSQL 9.1, and in PGlite) backslashes are plain
 * characters, so nothing else can end the literal. NUL cannot be in a PostgreSQL text value at all.
 */
export function sqlLiteral(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  const text = asText(value);
  if (text.includes('\0'))
    throw new Error('a parameter contains a NUL character, which PostgreSQL text cannot hold');
  return `'${text.replaceAll("'", "''")}'`;
}

function asText(value: unknown): string {
  if (value instanceof Date) return value.toISOString();
  if (Buffer.isBuffer(value) || value instanceof Uint8Array)
    return `\\x${Buffer.from(value).toString('hex')}`;
  if (Array.isArray(value)) return arrayLiteral(value);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function arrayLiteral(values: unknown[]): string {
  const items = values.map((item) => {
    if (item === null || item === undefined) return 'NULL';
    if (Array.isArray(item)) return arrayLiteral(item);
    return `"${asText(item).replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;
  });
  return `{${items.join(',')}}`;
}

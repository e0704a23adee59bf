import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ERROR_STATUS } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { ManualClock } from '../../testing/clock.ts';

/**
 * A fuzz test of the public surface: every operation of /openapi.json called with generated bad input
 * (wrong types, huge strings, unicode, NUL, unpaired surrogates, negative and huge numbers, missing and
 * extra fields, malformed JSON, other accounts' ids), REQUESTS requests from a fixed seed. Every answer
 * must be a 4xx in the documented error shape (never a 5xx), and a refused request must leave the
 * database as it was: triggers log every write to a state table, and the log must stay empty across
 * each refused request. Tables that record requests rather than state (request log, audit of denials,
 * activity, rate-limit counters) and key last-use times are not watched.
 */

const SEED = 0x5eed_0015;
// 10,000 on PGlite (the run the issue asks for); the PostgreSQL run repeats the same seed's first 3,000,
// which covers the SQL that differs between the two without doubling the file's time.
const REQUESTS = Number(
  process.env['ANVIL_FUZZ_REQUESTS'] ?? (process.env['ANVIL_TEST_DB'] === 'postgres' ? 3_000 : 10_000),
);

/** Bookkeeping every request may write: not state a refused request could change. */
const BOOKKEEPING_TABLES = new Set([
  '_prisma_migrations',
  'api_requests',
  'audit_events',
  'activity_events',
  'rate_limit_counters',
]);
const BOOKKEEPING_COLUMNS: Record<string, string[]> = {
  api_keys: ['last_used_at'],
  users: ['last_active_at'],
};

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
interface Schema {
  type?: string | string[];
  $ref?: string;
  enum?: Json[];
  const?: Json;
  format?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
}
interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  schema?: Schema;
}
interface Operation {
  method: string;
  path: string;
  parameters: Parameter[];
  body: Schema | null;
}

/** mulberry32: small, fast, and the same sequence for the same seed everywhere. */
function prng(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(list: readonly T[]): T => list[Math.floor(next() * list.length)]!,
    chance: (p: number) => next() < p,
  };
}
type Rng = ReturnType<typeof prng>;

const BAD_STRINGS: string[] = [
  '\u0000',
  'a\u0000b',
  '\uD800',
  'x\uDFFFy',
  '🚀名前\u202Eevil\u200B',
  'e\u0301\uFEFF',
  '',
  ' ',
  '../../etc/passwd',
  "'; DROP TABLE accounts; --",
  '$(touch /tmp/anvil-fuzz)',
  '%00',
  '<script>alert(1)</script>',
  '-1',
  '1e400',
  'null',
  'A'.repeat(300),
  'B'.repeat(20_000),
];
const BAD_NUMBERS: number[] = [
  -1,
  -2_147_483_649,
  2_147_483_648,
  2 ** 53 + 2,
  1e308,
  -1e308,
  0.5,
  -0,
  1e-300,
];
/** Text for the path and query: raw (percent-encoded by the sender) and pre-encoded invalid bytes. */
const BAD_URL_TEXT: string[] = [
  '%00',
  'a%00b',
  '%ED%A0%80',
  '%FF',
  '%',
  '%E2%80%AE',
  encodeURIComponent('🚀名前'),
  'C'.repeat(5_000),
  '-1',
  '99999999999999999999999',
  '1e308',
  'NaN',
  'true',
  '..',
  '%2e%2e',
  'null',
];

function resolve(schema: Schema | undefined, components: Record<string, Schema>, depth = 0): Schema {
  if (!schema || depth > 8) return {};
  if (schema.$ref) return resolve(components[schema.$ref.split('/').pop()!], components, depth + 1);
  if (schema.allOf && schema.allOf.length > 0) {
    const parts = schema.allOf.map((s) => resolve(s, components, depth + 1));
    return {
      type: 'object',
      properties: Object.assign({}, ...parts.map((p) => p.properties ?? {})),
      required: parts.flatMap((p) => p.required ?? []),
    };
  }
  return schema;
}

/** A value the schema would accept, as far as a simple reading of it goes. */
function plausible(schema: Schema, components: Record<string, Schema>, rng: Rng, depth = 0): Json {
  const s = resolve(schema, components);
  if (depth > 5) return null;
  if (s.const !== undefined) return s.const;
  if (s.enum && s.enum.length > 0) return rng.pick(s.enum);
  const alternatives = s.anyOf ?? s.oneOf;
  if (alternatives && alternatives.length > 0)
    return plausible(rng.pick(alternatives), components, rng, depth + 1);
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type;
  switch (type) {
    case 'string':
      if (s.format === 'date-time') return '2026-01-01T00:00:00.000Z';
      if (s.format === 'email') return 'fuzz@example.com';
      if (s.format === 'uri') return 'https://example.com/x';
      return 'fuzz'.padEnd(Math.max(s.minLength ?? 0, 4), 'z');
    case 'integer':
    case 'number':
      return s.minimum ?? 1;
    case 'boolean':
      return true;
    case 'array':
      return s.items ? [plausible(s.items, components, rng, depth + 1)] : [];
    case 'object': {
      const out: Record<string, Json> = {};
      for (const [name, inner] of Object.entries(s.properties ?? {})) {
        if (s.required?.includes(name) || rng.chance(0.3))
          out[name] = plausible(inner, components, rng, depth + 1);
      }
      return out;
    }
    default:
      return 'fuzz';
  }
}

function badValue(rng: Rng): Json {
  switch (rng.int(6)) {
    case 0:
    case 1:
      return rng.pick(BAD_STRINGS);
    case 2:
      return rng.pick(BAD_NUMBERS);
    case 3:
      return rng.pick<Json>([true, false, null, [], {}, [null], { a: { b: '\u0000' } }]);
    case 4:
      return [rng.pick(BAD_STRINGS), rng.pick(BAD_NUMBERS)];
    default:
      return {
        [rng.pick(['__proto__', 'constructor', 'x\u0000', 'a'.repeat(500), '\uD800'])]: rng.pick(BAD_STRINGS),
      };
  }
}

/** Paths into an object body (field names, nested one level), for the mutation to pick from. */
function fieldPaths(value: Json, prefix: string[] = [], depth = 0): string[][] {
  if (value === null || typeof value !== 'object' || Array.isArray(value) || depth > 2) return [];
  return Object.entries(value).flatMap(([key, inner]) => [
    [...prefix, key],
    ...fieldPaths(inner, [...prefix, key], depth + 1),
  ]);
}

function setAt(target: Record<string, Json>, path: string[], value: Json | undefined): void {
  let node: Record<string, Json> = target;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string, Json>;
  const last = path[path.length - 1]!;
  if (value === undefined) delete node[last];
  else node[last] = value;
}

/** A body the operation must refuse: a valid-looking one with one thing wrong, or no object at all. */
function badBody(
  op: Operation,
  components: Record<string, Schema>,
  rng: Rng,
): { payload: string; note: string } {
  const base = plausible(op.body!, components, rng);
  const roll = rng.int(10);
  if (roll === 0)
    return { payload: rng.pick(['{', '{"a":', '[1,]', '\u0000', '{"a":1}}', 'nul']), note: 'malformed JSON' };
  if (roll === 1 || base === null || typeof base !== 'object' || Array.isArray(base))
    return {
      payload: JSON.stringify(rng.pick<Json>([[], 'text', 42, null, true, [{}]])),
      note: 'not an object',
    };
  const body = base as Record<string, Json>;
  const paths = fieldPaths(body);
  const required = resolve(op.body!, components).required ?? [];
  if (roll === 2 && required.length > 0) {
    delete body[rng.pick(required)];
    return { payload: JSON.stringify(body), note: 'missing required field' };
  }
  if (roll === 3 || paths.length === 0) {
    body[rng.pick(['__fuzz', 'accountId', 'account_id', 'id', 'role', 'status'])] = badValue(rng);
    // An extra field the schema may declare: make sure something is still wrong.
    body['__fuzz_extra'] = true;
    return { payload: JSON.stringify(body), note: 'extra field' };
  }
  const path = rng.pick(paths);
  setAt(body, path, badValue(rng));
  // One bad value may happen to be acceptable (a free-text field takes any text): a second, unknown
  // field keeps the request invalid, except in a share of them, so values still reach deeper checks.
  if (rng.chance(0.5)) body['__fuzz_extra'] = rng.pick(BAD_STRINGS);
  return { payload: JSON.stringify(body), note: `bad value at ${path.join('.')}` };
}

/** What is wrong with an error answer's body, or null when it has the documented shape. */
function shapeProblem(url: string, status: number, body: unknown): string | null {
  const b = (body ?? {}) as Record<string, unknown>;
  let code: unknown;
  if (url.startsWith('/v1/')) {
    const error = (b['error'] ?? {}) as Record<string, unknown>;
    const meta = (b['meta'] ?? {}) as Record<string, unknown>;
    if (b['success'] !== false) return 'wrapped error without success: false';
    if (typeof error['message'] !== 'string') return 'wrapped error without a message';
    if (typeof error['details'] !== 'object' || error['details'] === null)
      return 'wrapped error without details';
    if (typeof meta['request_id'] !== 'string') return 'wrapped error without meta.request_id';
    code = error['code'];
  } else {
    if (typeof b['message'] !== 'string') return 'flat error without a message';
    if (b['code'] !== status) return `flat error whose code ${String(b['code'])} is not the status`;
    if (typeof b['details'] !== 'object' || b['details'] === null) return 'flat error without details';
    code = b['error'];
  }
  if (typeof code !== 'string' || !/^[A-Z][A-Z0-9_]*$/.test(code))
    return `error code ${String(code)} is not a code`;
  const catalogued = (ERROR_STATUS as Record<string, number>)[code];
  if (catalogued !== undefined && catalogued !== status)
    return `${code} answered ${status}, catalogue says ${catalogued}`;
  return null;
}

describe('fuzz: every operation with generated bad input', () => {
  let t: TestApp;
  let other: TestMember;
  let clock: ManualClock;
  let dataDir: string;
  let operations: Operation[];
  let components: Record<string, Schema>;
  const foreignIds: string[] = [];

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-06-01T00:00:00.000Z'));
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-fuzz-'));
    t = await createTestApp({ clock, env: { ANVIL_DATA_DIR: dataDir } });
    await t.context.db.prisma.account.update({ where: { id: t.accountId }, data: { tier: 'enterprise' } });
    // Another account with something of each kind: its ids are fed to this account's key.
    other = await addAccount(t, 'Fuzz other');
    const dataset = await call(t, {
      method: 'POST',
      url: '/v2/training/datasets',
      key: other,
      payload: { name: 'theirs', type: 'text', format: 'jsonl' },
    });
    const key = await call(t, {
      method: 'POST',
      url: '/v2/auth/api-keys',
      key: other,
      payload: { name: 'theirs', permissions: ['read'], scopes: ['accounts'] },
    });
    for (const res of [dataset])
      if (res.statusCode < 300) foreignIds.push(res.json().id ?? res.json().datasetId);
    if (key.statusCode < 300) foreignIds.push(key.json().key.id);
    foreignIds.push(other.accountId, other.userId);
    await t.context.keys.invalidate();
    await watchWrites();

    const spec = (await t.app.inject({ url: '/openapi.json' })).json() as {
      paths: Record<
        string,
        Record<
          string,
          { parameters?: Parameter[]; requestBody?: { content?: Record<string, { schema?: Schema }> } }
        >
      >;
      components?: { schemas?: Record<string, Schema> };
    };
    components = spec.components?.schemas ?? {};
    operations = [];
    for (const [path, methods] of Object.entries(spec.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
        const body = op.requestBody?.content?.['application/json']?.schema ?? null;
        operations.push({ method: method.toUpperCase(), path, parameters: op.parameters ?? [], body });
      }
    }
  }, 120_000);
  afterAll(async () => {
    if (t) await unwatchWrites();
    await t?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  /**
   * Every row written to a state table is logged by a trigger this test installs (an update only when
   * the row really changed, bookkeeping columns aside): after a refused request the log must be empty.
   * Cheaper than comparing table digests after each request, and it names the table.
   */
  async function watchWrites(): Promise<void> {
    const tables = await t.context.db.sql.query<{ tablename: string }>(
      `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`,
    );
    const ignored = Object.values(BOOKKEEPING_COLUMNS)
      .flat()
      .map((c) => ` - '${c}'`)
      .join('');
    const statements = [
      'CREATE TABLE fuzz_writes (table_name text NOT NULL, op text NOT NULL)',
      `CREATE FUNCTION fuzz_log_write() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO fuzz_writes VALUES (TG_TABLE_NAME, TG_OP); RETURN NULL; END $$`,
    ];
    for (const { tablename } of tables) {
      if (BOOKKEEPING_TABLES.has(tablename)) continue;
      statements.push(
        `CREATE TRIGGER fuzz_ins_del AFTER INSERT OR DELETE ON "${tablename}" FOR EACH ROW EXECUTE FUNCTION fuzz_log_write()`,
        `CREATE TRIGGER fuzz_upd AFTER UPDATE ON "${tablename}" FOR EACH ROW
           WHEN ((to_jsonb(OLD)${ignored}) IS DISTINCT FROM (to_jsonb(NEW)${ignored})) EXECUTE FUNCTION fuzz_log_write()`,
      );
    }
    for (const statement of statements) await t.context.db.sql.query(statement);
  }

  async function unwatchWrites(): Promise<void> {
    await t.context.db.sql.query('DROP FUNCTION IF EXISTS fuzz_log_write() CASCADE');
    await t.context.db.sql.query('DROP TABLE IF EXISTS fuzz_writes');
  }

  /** Tables written since the last call ('' when none), and the log emptied. */
  async function writes(): Promise<string> {
    const rows = await t.context.db.sql.query<{ table_name: string; op: string }>(
      'DELETE FROM fuzz_writes RETURNING table_name, op',
    );
    return [...new Set(rows.map((r) => `${r.op} ${r.table_name}`))].join(', ');
  }

  it(`answers ${REQUESTS} bad requests with 4xx in the documented shape and changes nothing`, async () => {
    expect(operations.length).toBeGreaterThan(100);
    const rng = prng(SEED);
    const serverErrors: string[] = [];
    const changed: string[] = [];
    const accepted: string[] = [];
    const badShapes: string[] = [];
    await writes();
    let sinceCheck: string[] = [];
    const started = Date.now();
    for (let n = 0; n < REQUESTS; n++) {
      // Every limit is far above a window's share: a fresh window every 250 requests keeps 429s rare.
      if (n % 250 === 0) clock.advance(3_600_000);
      const op = operations[n % operations.length]!;
      const request = buildRequest(op, rng);
      const res = await t.app.inject({
        method: op.method as 'GET',
        url: request.url,
        headers: request.headers,
        ...(request.payload === undefined ? {} : { payload: request.payload }),
      });
      const label = `${op.method} ${op.path} [${request.note}] -> ${res.statusCode}`;
      sinceCheck.push(label);
      if (sinceCheck.length > 20) sinceCheck.shift();
      if (res.statusCode >= 500) serverErrors.push(`${label}: ${request.url} ${res.body.slice(0, 200)}`);
      else if (res.statusCode >= 400) {
        const json = String(res.headers['content-type'] ?? '').includes('application/json');
        const problem = json ? shapeProblem(request.url, res.statusCode, res.json()) : 'not JSON';
        if (problem) badShapes.push(`${label}: ${problem}: ${res.body.slice(0, 200)}`);
      } else if (op.method !== 'GET') {
        accepted.push(`${label}: ${request.url} ${request.payload?.slice(0, 200) ?? ''}`);
      }
      // GETs are checked in batches (the log keeps what they wrote); anything else right away.
      if (op.method === 'GET' && n % 20 !== 19) continue;
      const written = await writes();
      if (written && (res.statusCode >= 400 || op.method === 'GET'))
        changed.push(`${sinceCheck.join(' | ')} wrote ${written}`);
      sinceCheck = [];
    }
    process.stderr.write(
      `fuzz: ${REQUESTS} requests over ${operations.length} operations in ${Date.now() - started} ms\n`,
    );
    expect(serverErrors, serverErrors.join('\n')).toEqual([]);
    expect(badShapes, badShapes.join('\n')).toEqual([]);
    expect(changed, changed.join('\n')).toEqual([]);
    // Some generated values are valid after all (free text takes any Unicode, a tiny positive number is
    // positive); those requests may change things. They stay a small share, so the rest is refused.
    expect(accepted.length, accepted.join('\n')).toBeLessThan(REQUESTS * 0.05);
  }, 900_000);

  function buildRequest(
    op: Operation,
    rng: Rng,
  ): { url: string; headers: Record<string, string>; payload?: string; note: string } {
    const notes: string[] = [];
    const pathParams = op.parameters.filter((p) => p.in === 'path');
    const queryParams = op.parameters.filter((p) => p.in === 'query');
    const hasBody = op.body !== null && op.method !== 'GET' && op.method !== 'DELETE';
    // What is wrong with this request: the body when there is one (mostly), else a path or query value.
    const target =
      hasBody && rng.chance(0.7) ? 'body' : pathParams.length > 0 && rng.chance(0.7) ? 'path' : 'query';
    let url = op.path;
    for (const p of pathParams) {
      let value: string;
      if (target === 'path' && (p === pathParams[pathParams.length - 1] || rng.chance(0.3))) {
        value = rng.chance(0.35) && foreignIds.length > 0 ? rng.pick(foreignIds) : rng.pick(BAD_URL_TEXT);
        notes.push(`path ${p.name}=${value.slice(0, 30)}`);
      } else {
        value = rng.chance(0.5) && foreignIds.length > 0 ? rng.pick(foreignIds) : `x_${rng.int(1e6)}`;
      }
      url = url.replace(`{${p.name}}`, value.includes('%') ? value : encodeURIComponent(value));
    }
    const query: string[] = [];
    for (const p of queryParams) {
      if (target === 'query' && rng.chance(0.6)) {
        const value = rng.pick(BAD_URL_TEXT);
        query.push(
          `${encodeURIComponent(p.name)}=${value.includes('%') ? value : encodeURIComponent(value)}`,
        );
        notes.push(`query ${p.name}`);
      }
    }
    if (target === 'query' && (query.length === 0 || rng.chance(0.3))) {
      // Unknown parameters, and NUL in one, which must be refused even where extras are ignored.
      query.push(`${rng.pick(['__fuzz', 'account_id', 'limit'])}=${rng.pick(['%00', 'x%00', '%ED%A0%80'])}`);
      notes.push('query extra');
    }
    if (query.length > 0) url += `?${query.join('&')}`;
    const headers: Record<string, string> = {};
    const auth = rng.int(20);
    if (auth === 0) notes.push('no key');
    else if (auth === 1) {
      headers['authorization'] = rng.pick([
        'Bearer ',
        'Bearer anvil_live_nope',
        'Basic abc',
        `Bearer ${other.key}x`,
      ]);
      notes.push('bad key');
    } else headers['authorization'] = `Bearer ${t.ownerKey}`;
    let payload: string | undefined;
    if (hasBody) {
      headers['content-type'] = 'application/json';
      if (target === 'body') {
        const bad = badBody(op, components, rng);
        payload = bad.payload;
        notes.push(bad.note);
      } else {
        // The path or query is what is wrong; the body is one the operation would take.
        payload = JSON.stringify(plausible(op.body!, components, rng));
      }
    }
    return { url, headers, ...(payload === undefined ? {} : { payload }), note: notes.join('; ') };
  }
});

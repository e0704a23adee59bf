import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase, testDatabaseKind } from '../testing/database.ts';
import { sqlLiteral } from './pglite-prepared.ts';

/**
 * A named statement answers what the same statement answers unnamed, for every kind of value a caller
 * passes (PGlite sends them as quoted literals to EXECUTE, PostgreSQL binds them), and a value can never
 * end its literal early.
 */
describe(`named statements (${testDatabaseKind()})`, () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase({ migrated: false });
  });
  afterAll(async () => database?.drop());

  const ROUND_TRIP = `SELECT $1::text AS text, $2::int AS int, $3::boolean AS bool, $4::timestamptz AS at,
      $5::text[] AS list, $6::jsonb AS doc, $7::bytea AS bytes, $8::text AS nothing, $9::bigint AS big,
      $10::int[] AS ints`;
  const values = [
    `it's a "quote", a back\\slash, a brace } and a comma ,'); DROP TABLE x; --`,
    42,
    true,
    new Date('2026-11-27T13:00:00.123Z'),
    ['plain', `o'clock`, 'with "quotes"', 'back\\slash', 'comma,brace{}', '', 'NULL'],
    { nested: { list: [1, 'two'], quote: `'"` } },
    Buffer.from([0, 1, 254, 255]),
    null,
    '9007199254740993',
    [1, 2, 3],
  ];

  it('answers as the unnamed statement does, for every kind of value', async () => {
    const unnamed = await database.db.sql.query(ROUND_TRIP, values);
    const named = await database.db.sql.query(ROUND_TRIP, values, 'test_round_trip');
    const again = await database.db.sql.query(ROUND_TRIP, values, 'test_round_trip');
    expect(named).toEqual(unnamed);
    expect(again).toEqual(unnamed);
    expect(named[0]).toMatchObject({
      text: values[0],
      int: 42,
      bool: true,
      at: values[3],
      list: values[4],
      doc: values[5],
      nothing: null,
      ints: [1, 2, 3],
    });
  });

  it('infers the parameter types from the statement, as a bound parameter', async () => {
    await database.db.sql.exec(
      'CREATE TABLE IF NOT EXISTS named_probe (id text PRIMARY KEY, n int, at timestamptz)',
    );
    const insert = 'INSERT INTO named_probe (id, n, at) VALUES ($1, $2, $3) RETURNING id, n, at';
    const at = new Date('2026-01-02T03:04:05.006Z');
    expect(await database.db.sql.query(insert, ['a', 7, at], 'test_named_insert')).toEqual([
      { id: 'a', n: 7, at },
    ]);
    expect(await database.db.sql.query(insert, ['b', null, null], 'test_named_insert')).toEqual([
      { id: 'b', n: null, at: null },
    ]);
    const select = 'SELECT id FROM named_probe WHERE id = ANY($1::text[]) ORDER BY id';
    expect(await database.db.sql.query(select, [['a', 'b', "c'"]], 'test_named_any')).toEqual([
      { id: 'a' },
      { id: 'b' },
    ]);
  });

  it.runIf(testDatabaseKind() === 'pglite')('prepares again once the session has forgotten it', async () => {
    const select = 'SELECT $1::int + 1 AS n';
    expect(await database.db.sql.query(select, [1], 'test_forgotten')).toEqual([{ n: 2 }]);
    await database.db.sql.exec('DEALLOCATE ALL');
    expect(await database.db.sql.query(select, [2], 'test_forgotten')).toEqual([{ n: 3 }]);
  });

  it('refuses a value that cannot be a PostgreSQL text, and a name that is not an identifier', async () => {
    expect(() => sqlLiteral('a\0b')).toThrow(/NUL/);
    expect(sqlLiteral(`'; DROP TABLE x; --`)).toBe(`'''; DROP TABLE x; --'`);
    if (testDatabaseKind() === 'pglite') {
      await expect(database.db.sql.query('SELECT 1', [], 'bad name; DROP')).rejects.toThrow(/identifier/);
    }
  });
});

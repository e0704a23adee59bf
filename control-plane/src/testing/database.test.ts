import { describe, expect, it } from 'vitest';
import { createTestDatabase, testDatabaseKind } from './database.ts';

async function insertSample(db: Awaited<ReturnType<typeof createTestDatabase>>['db']): Promise<string> {
  const [row] = await db.sql.query<{ id: string }>(
    `INSERT INTO metric_samples (host_id, kind, series, at, data, received_at)
     VALUES ('host_x', 'gpu', 'g0', now(), '{}', now()) RETURNING id::text AS id`,
  );
  return row!.id;
}

describe(`test databases (${testDatabaseKind()})`, () => {
  it('hands every test an empty, migrated database, whatever the one before it left', async () => {
    for (let round = 0; round < 3; round++) {
      const database = await createTestDatabase();
      try {
        // Sequences start over (RESTART IDENTITY on a pooled PGlite, a new database on PostgreSQL).
        expect(await insertSample(database.db)).toBe('1');
        await database.db.sql.exec('CREATE TEMP TABLE left_behind (x int)');
        // An open transaction and an advisory lock the test never released.
        if (testDatabaseKind() === 'pglite') await database.db.sql.exec('BEGIN; SELECT pg_advisory_lock(42)');
        const [counts] = await database.db.sql.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM _prisma_migrations`,
        );
        expect(counts!.n).toBeGreaterThan(10);
      } finally {
        await database.drop();
      }
    }
  });

  it('refuses the work a test does after dropping its database, so it cannot reach the next test', async () => {
    const database = await createTestDatabase();
    await database.drop();
    await expect(insertSample(database.db)).rejects.toThrow();
    const next = await createTestDatabase();
    try {
      await expect(insertSample(database.db)).rejects.toThrow();
      const [row] = await next.db.sql.query<{ n: number }>('SELECT count(*)::int AS n FROM metric_samples');
      expect(row!.n).toBe(0);
      const temp = await next.db.sql.query(`SELECT 1 FROM pg_class WHERE relname = 'left_behind'`);
      expect(temp).toEqual([]);
    } finally {
      await next.drop();
    }
  });
});

import { randomBase36 } from '@anvil/shared';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { type Database, migrate, openPglite, openPostgres } from '../db/index.ts';

/**
 * A fresh, migrated database for one test. PGlite costs ~1.5 s to boot, so each worker migrates one
 * in-memory template and clones it per test. On PostgreSQL (ANVIL_TEST_DB=postgres) each test gets
 * its own database, dropped afterwards.
 */
export interface TestDatabase {
  db: Database;
  /** Connection string on PostgreSQL, null on PGlite (which only this process can open). */
  url: string | null;
  drop(): Promise<void>;
}

let template: Promise<PGlite> | null = null;

function pgliteTemplate(): Promise<PGlite> {
  template ??= (async () => {
    const client = await PGlite.create();
    await migrate({
      query: async (text, params) => (await client.query(text, params)).rows as never[],
      exec: async (script) => {
        await client.exec(script);
      },
    });
    return client;
  })();
  return template;
}

export function testDatabaseKind(): 'pglite' | 'postgres' {
  return process.env['ANVIL_TEST_DB'] === 'postgres' ? 'postgres' : 'pglite';
}

export function postgresAdminUrl(): string {
  const url = process.env['ANVIL_TEST_POSTGRES_URL'];
  if (!url) throw new Error('ANVIL_TEST_DB=postgres needs ANVIL_TEST_POSTGRES_URL');
  return url;
}

/** Creates an empty PostgreSQL database and returns its URL (for tests that run the real server). */
export async function createPostgresDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const adminUrl = postgresAdminUrl();
  const name = `anvil_test_${randomBase36(12)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}

export async function createTestDatabase(options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const migrated = options.migrated ?? true;
  if (testDatabaseKind() === 'postgres') {
    const created = await createPostgresDatabase();
    const db = openPostgres(created.url, 5);
    if (migrated) await db.session((sql) => migrate(sql));
    return {
      db,
      url: created.url,
      async drop() {
        await db.close().catch(() => {});
        await created.drop();
      },
    };
  }
  const client = migrated ? ((await (await pgliteTemplate()).clone()) as PGlite) : await PGlite.create();
  const db = openPglite(client);
  return { db, url: null, drop: () => db.close() };
}

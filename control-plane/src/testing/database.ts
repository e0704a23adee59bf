import { createHash } from 'node:crypto';
import { randomBase36 } from '@anvil/shared';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { type Database, migrate, openPglite, openPostgres, readMigrations } from '../db/index.ts';

/**
 * A fresh, migrated database for one test.
 * - PGlite: booting an instance costs 1-3 s (most of a short test), so instances are pooled per
 *   worker. A test leases one, sees only a handle that refuses work once the test dropped it (late
 *   writes of a stopped app never reach the next test), and the instance is emptied before its next
 *   lease: rolled back, DISCARD ALL's steps but RESET (temp objects, locks, listeners, plans), every table but the
 *   migration record truncated with its sequences restarted. The migrations seed no rows, so an
 *   emptied instance is a freshly migrated one. One that cannot be emptied is closed, never reused.
 * - PostgreSQL (ANVIL_TEST_DB=postgres): databases copied from a template migrated once per migration
 *   set (CREATE DATABASE ... TEMPLATE), pooled per process the same way (every session on a dropped
 *   one ended, its tables truncated); those of ended processes are dropped by the next one.
 */
export interface TestDatabase {
  db: Database;
  /** Connection string on PostgreSQL, null on PGlite (which only this process can open). */
  url: string | null;
  drop(): Promise<void>;
}

/** Emptied, migrated instances no test holds. */
const idlePglite: PGlite[] = [];

const EMPTY_TABLES = `DO $$
DECLARE tables text;
BEGIN
  SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO tables
    FROM pg_tables WHERE schemaname = 'public' AND tablename <> '_prisma_migrations';
  IF tables IS NOT NULL THEN EXECUTE 'TRUNCATE ' || tables || ' RESTART IDENTITY CASCADE'; END IF;
END $$`;

/** Empties a released instance and pools it, or closes it when that fails or takes too long. */
async function recycle(client: PGlite): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error('emptying the test database timed out')), 10_000);
  });
  try {
    await Promise.race([
      (async () => {
        // A transaction a test left open (the warning when there is none is harmless).
        await client.exec('ROLLBACK');
        // DISCARD ALL but RESET ALL, which would drop PGlite's own session settings (its search_path).
        await client.exec(
          'CLOSE ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD SEQUENCES; DISCARD TEMP; DEALLOCATE ALL',
        );
        await client.exec(EMPTY_TABLES);
      })(),
      limit,
    ]);
    idlePglite.push(client);
  } catch {
    await client.close().catch(() => {});
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The instance as one test sees it: every method refuses once the test released it, `close()`
 * releases it (ends its subscriptions, then empties and pools the instance) rather than closing it.
 */
function lease(client: PGlite): PGlite {
  let released = false;
  let recycled: Promise<void> | null = null;
  const unsubscribes = new Set<() => Promise<void>>();
  const refuse = () => Promise.reject(new Error('this test database was dropped'));
  return new Proxy(client, {
    get(target, property) {
      if (property === 'closed') return released || target.closed;
      if (property === 'close') {
        return () => {
          released = true;
          recycled ??= (async () => {
            for (const unsubscribe of unsubscribes) await unsubscribe().catch(() => {});
            await recycle(target);
          })();
          return recycled;
        };
      }
      if (property === 'listen') {
        return async (channel: string, callback: (payload: string) => void) => {
          if (released) return refuse();
          const unsubscribe = await target.listen(channel, callback);
          unsubscribes.add(unsubscribe);
          return async () => {
            unsubscribes.delete(unsubscribe);
            await unsubscribe();
          };
        };
      }
      const value = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => (released ? refuse() : value.apply(target, args));
    },
  });
}

/** A pooled instance, else a new one migrated here (as fast as cloning one: both boot an instance). */
async function leasePglite(): Promise<PGlite> {
  let client = idlePglite.pop();
  if (!client) {
    client = await PGlite.create();
    const booted = client;
    await migrate({
      query: async (text, params) => (await booted.query(text, params)).rows as never[],
      exec: async (script) => {
        await booted.exec(script);
      },
    });
  }
  return lease(client);
}

let postgresTemplate: Promise<string> | null = null;

/**
 * The name of a database holding the current migrations, shared by every worker and run (named by
 * the migrations' checksums, so a changed migration gets a new one). Made under an advisory lock,
 * as workers start together; left in place for the next run.
 */
function postgresTemplateName(): Promise<string> {
  postgresTemplate ??= (async () => {
    const hash = createHash('sha256');
    for (const migration of readMigrations()) hash.update(`${migration.name}:${migration.checksum}\n`);
    const name = `anvil_test_template_${hash.digest('hex').slice(0, 16)}`;
    const adminUrl = postgresAdminUrl();
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query('SELECT pg_advisory_lock(7245318002)');
      const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
      if (exists.rowCount === 0) {
        // Built under a temporary name and renamed: a run killed half way leaves no half-migrated template.
        const building = `${name}_${randomBase36(6)}`;
        await admin.query(`CREATE DATABASE ${building}`);
        const url = new URL(adminUrl);
        url.pathname = `/${building}`;
        const db = openPostgres(url.toString(), 1);
        try {
          await db.session((sql) => migrate(sql));
        } finally {
          await db.close();
        }
        await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`);
      }
    } finally {
      await admin.end();
    }
    return name;
  })();
  postgresTemplate.catch(() => {
    postgresTemplate = null;
  });
  return postgresTemplate;
}

export function testDatabaseKind(): 'pglite' | 'postgres' {
  return process.env['ANVIL_TEST_DB'] === 'postgres' ? 'postgres' : 'pglite';
}

export function postgresAdminUrl(): string {
  const url = process.env['ANVIL_TEST_POSTGRES_URL'];
  if (!url) throw new Error('ANVIL_TEST_DB=postgres needs ANVIL_TEST_POSTGRES_URL');
  return url;
}

/**
 * Creates a PostgreSQL database and returns its URL: empty (for tests that run the real server, which
 * migrates it), or a copy of `template`.
 */
export async function createPostgresDatabase(
  template?: string,
): Promise<{ url: string; drop(): Promise<void> }> {
  const adminUrl = postgresAdminUrl();
  const name = `anvil_test_${randomBase36(12)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(template ? `CREATE DATABASE ${name} TEMPLATE ${template}` : `CREATE DATABASE ${name}`);
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

/** Migrated, emptied PostgreSQL databases of this process no test holds (names). */
const idlePostgres: string[] = [];
/** Pooled databases are named for their process, so a later one can drop those of processes gone. */
const POOLED_PREFIX = 'anvil_test_p';
let janitor: Promise<void> | null = null;

function databaseUrl(name: string): string {
  const url = new URL(postgresAdminUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

/** Runs `work` on a connection to `database` (the admin database by default), then closes it. */
async function withClient<T>(database: string | null, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: database ? databaseUrl(database) : postgresAdminUrl() });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end().catch(() => {});
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Drops the pooled databases of test processes that have ended (a worker ends after its file). */
function dropOrphans(): Promise<void> {
  janitor ??= withClient(null, async (admin) => {
    const { rows } = await admin.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname LIKE '${POOLED_PREFIX}%'`,
    );
    for (const { datname } of rows) {
      const pid = Number(/^anvil_test_p(\d+)_/.exec(datname)?.[1]);
      if (!Number.isInteger(pid) || alive(pid)) continue;
      await admin.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`).catch(() => {});
    }
  }).catch(() => {});
  return janitor;
}

/**
 * A migrated, empty database: one this process emptied before, or a new copy of the template. Emptying
 * ends every session on it first (so nothing a test left running holds a lock, a temporary object or a
 * listener), then truncates every table but the migration record, restarting sequences.
 */
async function leasePostgres(): Promise<{ name: string; release(): Promise<void> }> {
  void dropOrphans();
  let name = idlePostgres.pop();
  if (!name) {
    name = `${POOLED_PREFIX}${process.pid}_${randomBase36(8)}`;
    const template = await postgresTemplateName();
    await withClient(null, (admin) => admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
  }
  const leased = name;
  return {
    name: leased,
    async release() {
      try {
        await withClient(null, (admin) =>
          admin.query(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
            [leased],
          ),
        );
        await withClient(leased, (client) => client.query(EMPTY_TABLES));
        idlePostgres.push(leased);
      } catch {
        await withClient(null, (admin) =>
          admin.query(`DROP DATABASE IF EXISTS ${leased} WITH (FORCE)`),
        ).catch(() => {});
      }
    },
  };
}

export async function createTestDatabase(options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const migrated = options.migrated ?? true;
  if (testDatabaseKind() === 'postgres') {
    if (!migrated) {
      const created = await createPostgresDatabase();
      const db = openPostgres(created.url, 5);
      return {
        db,
        url: created.url,
        async drop() {
          await db.close().catch(() => {});
          await created.drop();
        },
      };
    }
    const leased = await leasePostgres();
    const db = openPostgres(databaseUrl(leased.name), 5);
    return {
      db,
      url: databaseUrl(leased.name),
      async drop() {
        await db.close().catch(() => {});
        await leased.release();
      },
    };
  }
  const client = migrated ? await leasePglite() : await PGlite.create();
  const db = openPglite(client);
  return { db, url: null, drop: () => db.close() };
}

import { createHash, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Sql } from './database.ts';

export const MIGRATIONS_DIR = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'prisma',
  'migrations',
);

// Any constant works as long as every replica uses the same one: it serialises concurrent migrators.
const MIGRATION_LOCK_ID = 7_245_318_001;

export interface Migration {
  name: string;
  sql: string;
  checksum: string;
}

export function readMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort()
    .map((name) => {
      const sql = readFileSync(join(dir, name, 'migration.sql'), 'utf8');
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
    });
}

/**
 * Applies pending migrations in order and records them in Prisma's own `_prisma_migrations` table,
 * so `prisma migrate deploy` and this migrator agree on what has run. Each migration runs in a
 * transaction; an edited, already-applied migration stops start-up instead of drifting silently.
 */
export async function migrate(sql: Sql, migrations = readMigrations()): Promise<string[]> {
  await sql.exec(`CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
    "id" VARCHAR(36) PRIMARY KEY NOT NULL,
    "checksum" VARCHAR(64) NOT NULL,
    "finished_at" TIMESTAMPTZ,
    "migration_name" VARCHAR(255) NOT NULL,
    "logs" TEXT,
    "rolled_back_at" TIMESTAMPTZ,
    "started_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
    "applied_steps_count" INTEGER NOT NULL DEFAULT 0
  )`);
  await sql.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
  try {
    const rows = await sql.query<{ migration_name: string; checksum: string }>(
      'SELECT migration_name, checksum FROM "_prisma_migrations" WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL',
    );
    const applied = new Map(rows.map((row) => [row.migration_name, row.checksum]));
    const ran: string[] = [];
    for (const migration of migrations) {
      const checksum = applied.get(migration.name);
      if (checksum !== undefined) {
        if (checksum !== migration.checksum) {
          throw new Error(`migration ${migration.name} was edited after it was applied (checksum differs)`);
        }
        continue;
      }
      const id = randomUUID();
      await sql
        .exec(
          `BEGIN;\n${migration.sql}\n;INSERT INTO "_prisma_migrations" (id, checksum, migration_name, finished_at, applied_steps_count) VALUES ('${id}', '${migration.checksum}', '${migration.name.replaceAll("'", "''")}', now(), 1);\nCOMMIT;`,
        )
        .catch(async (error: unknown) => {
          await sql.exec('ROLLBACK').catch(() => {});
          throw new Error(`migration ${migration.name} failed: ${(error as Error).message}`);
        });
      ran.push(migration.name);
    }
    return ran;
  } finally {
    await sql.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
  }
}

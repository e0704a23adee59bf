import { type Database, openDatabase } from './database.ts';
import { migrate } from './migrator.ts';

export { batchRowsFor, betweenStatements, IN_THREAD_BATCH_ROWS } from './batching.ts';
export type { Database, Sql } from './database.ts';
export {
  openDatabase,
  openEmbedded,
  openPglite,
  openPostgres,
  safetySweepMs,
  soleProcess,
} from './database.ts';
export { migrate, readMigrations } from './migrator.ts';

/** Opens the configured database and brings its schema up to date. */
export async function openMigratedDatabase(options: {
  databaseUrl: string | null;
  dataDir: string;
}): Promise<Database> {
  const db = await openDatabase(options);
  try {
    await db.session((sql) => migrate(sql));
  } catch (error) {
    await db.close().catch(() => {});
    throw error;
  }
  return db;
}

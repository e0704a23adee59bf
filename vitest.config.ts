import { readdirSync, readFileSync } from 'node:fs';
import { defineConfig } from 'vitest/config';

// Unit tests sit beside the code; tests spanning packages live in test/.
// When ANVIL_TEST_POSTGRES_URL is set (CI does), every database-backed test also runs on PostgreSQL.
const postgresUrl = process.env['ANVIL_TEST_POSTGRES_URL'];

/**
 * The control plane's test files that open a database (through the test app, a test database or a
 * PostgreSQL URL): only these run again on PostgreSQL; the rest would repeat the same work.
 */
function databaseTests(): string[] {
  const uses =
    /createTestApp|createTestDatabase|createPostgresDatabase|openPostgres|testDatabaseKind|ANVIL_TEST_DB/;
  return readdirSync('control-plane/src', { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.test.ts'))
    .map((file) => `control-plane/src/${file}`)
    .filter((file) => uses.test(readFileSync(file, 'utf8')))
    .sort();
}

const shared = {
  testTimeout: 60_000,
  hookTimeout: 120_000,
  // Files share their worker's module cache rather than each importing everything afresh: the first test
  // app of a process costs ~5 s (PGlite boot, schema compilation, JIT), later ones ~0.3 s, and the PGlite
  // and PostgreSQL test databases are pooled per process (testing/database.ts), so isolation cost ~4 s a
  // file. Tests hold no state in modules they do not reset: each app and database is made and closed by
  // its file. The PGlite project took ~1,000 s isolated and 454 s so.
  isolate: false,
};

// Test files run one at a time by default (vitest's default on two cores): in parallel, the fleet fault
// tests (private dockerd restarts) time out on a two-core machine. ANVIL_TEST_WORKERS=<n> runs n at once
// where there are cores to spare.
const workers = process.env['ANVIL_TEST_WORKERS'] ? Number(process.env['ANVIL_TEST_WORKERS']) : undefined;

export default defineConfig({
  test: {
    ...(workers ? { maxWorkers: workers } : {}),
    projects: [
      {
        test: {
          ...shared,
          name: 'pglite',
          include: [
            'shared/src/**/*.test.ts',
            'control-plane/src/**/*.test.ts',
            'agent/src/**/*.test.ts',
            'cli/src/**/*.test.ts',
            'test/**/*.test.ts',
          ],
          env: { ANVIL_TEST_DB: 'pglite' },
        },
      },
      ...(postgresUrl
        ? [
            {
              test: {
                ...shared,
                name: 'postgres',
                include: [...databaseTests(), 'test/**/*.db.test.ts'],
                env: { ANVIL_TEST_DB: 'postgres' },
              },
            },
          ]
        : []),
    ],
  },
});

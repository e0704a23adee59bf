import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Which tier each test file belongs to, read from what the file uses, so that a new test lands in the
 * right tier without a list to keep:
 * - end-to-end: everything under test/, and any test beside the code that runs Docker or a browser;
 * - database: a test beside the code that opens a database (the test app, a test database, PGlite);
 * - unit: the rest, which touch neither, and so can run side by side in parallel workers.
 * vitest.config.ts makes a project of each tier; test/tiers.test.ts checks the split.
 */
export type Tier = 'unit' | 'database' | 'e2e';

/** Folders whose tests sit beside the code. */
export const SOURCE_ROOTS = ['shared/src', 'control-plane/src', 'agent/src', 'cli/src'] as const;

/** Tests that open a database through the control plane's testing helpers: these run on PostgreSQL too. */
export const OPENS_TEST_DATABASE =
  /createTestApp|createTestDatabase|createPostgresDatabase|openPostgres|testDatabaseKind|ANVIL_TEST_DB/;
/** A database opened directly on PGlite: the database tier, on PGlite only. */
const OPENS_PGLITE = /openPglite|PGlite\.create|@electric-sql\/pglite/;
/** Docker (the engine, the fixtures' images, an agent against it) or Chromium. */
export const USES_DOCKER_OR_BROWSER =
  /fixtures\/images\/(docker|busybox)\.ts|fleet\/docker\.ts|\bstartAgent\(|testDocker\(|browserOrFail/;

export function tierOf(path: string, source: string): Tier {
  if (path.startsWith('test/') || USES_DOCKER_OR_BROWSER.test(source)) return 'e2e';
  if (OPENS_TEST_DATABASE.test(source) || OPENS_PGLITE.test(source)) return 'database';
  return 'unit';
}

/** Every test file of the repository (paths relative to `root`), sorted. */
export function testFiles(root = '.'): string[] {
  return [...SOURCE_ROOTS, 'test']
    .flatMap((dir) =>
      readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' })
        .filter((file) => file.endsWith('.test.ts') && !file.includes('node_modules'))
        .map((file) => `${dir}/${file}`),
    )
    .sort();
}

/** The test files of each tier, and those of the control plane that also run on PostgreSQL. */
export function testTiers(root = '.'): Record<Tier, string[]> & { postgres: string[] } {
  const tiers = {
    unit: [] as string[],
    database: [] as string[],
    e2e: [] as string[],
    postgres: [] as string[],
  };
  for (const file of testFiles(root)) {
    const source = readFileSync(join(root, file), 'utf8');
    tiers[tierOf(file, source)].push(file);
    if (file.startsWith('control-plane/src/') && OPENS_TEST_DATABASE.test(source)) tiers.postgres.push(file);
  }
  return tiers;
}

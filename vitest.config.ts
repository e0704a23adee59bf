import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { testTiers } from './test/tiers.ts';

// Three tiers (test/tiers.ts says which file goes where): unit (no database, Docker or browser), database
// and end-to-end. `npm run test:unit` is the fast loop; `npm test` (and CI) runs them all. When
// ANVIL_TEST_POSTGRES_URL is set (CI does), the control plane's database tests and every
// test/**/*.db.test.ts also run on PostgreSQL.
const postgresUrl = process.env['ANVIL_TEST_POSTGRES_URL'];
const tiers = testTiers();

const shared = {
  testTimeout: 60_000,
  hookTimeout: 120_000,
  // Files share their worker's module cache rather than each importing everything afresh: the first test
  // app of a process costs ~5 s (PGlite boot, schema compilation, JIT), later ones ~0.3 s, and the PGlite
  // and PostgreSQL test databases are pooled per process (testing/database.ts), so isolation cost ~4 s a
  // file. Tests hold no state in modules they do not reset: each app and database is made and closed by
  // its file. The PGlite project took ~1,000 s isolated and 454 s so.
  isolate: false,
  env: { ANVIL_TEST_DB: 'pglite' },
};

// Database and end-to-end files run one at a time by default (vitest's default on two cores): in
// parallel, the fleet fault tests (private dockerd restarts) time out on a two-core machine.
// ANVIL_TEST_WORKERS=<n> runs n at once where there are cores to spare. Unit tests wait on child
// processes and timers more than they compute, so they run two at a time even on two cores, in a group
// of their own before the rest (vitest runs projects of different worker counts in separate groups).
const workers = process.env['ANVIL_TEST_WORKERS'] ? Number(process.env['ANVIL_TEST_WORKERS']) : undefined;
const unitWorkers = Math.max(2, workers ?? availableParallelism() - 1);

export default defineConfig({
  test: {
    ...(workers ? { maxWorkers: workers } : {}),
    projects: [
      {
        test: {
          ...shared,
          name: 'unit',
          include: tiers.unit,
          maxWorkers: unitWorkers,
          sequence: { groupOrder: 0 },
        },
      },
      { test: { ...shared, name: 'database', include: tiers.database, sequence: { groupOrder: 1 } } },
      { test: { ...shared, name: 'e2e', include: tiers.e2e, sequence: { groupOrder: 1 } } },
      ...(postgresUrl
        ? [
            {
              test: {
                ...shared,
                name: 'postgres',
                include: [...tiers.postgres, 'test/**/*.db.test.ts'],
                env: { ANVIL_TEST_DB: 'postgres' },
                sequence: { groupOrder: 1 },
              },
            },
          ]
        : []),
    ],
  },
});

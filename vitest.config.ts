import { defineConfig } from 'vitest/config';

// Unit tests sit beside the code; tests spanning packages live in test/.
// When ANVIL_TEST_POSTGRES_URL is set (CI does), every database-backed test also runs on PostgreSQL.
const postgresUrl = process.env['ANVIL_TEST_POSTGRES_URL'];

const shared = {
  testTimeout: 60_000,
  hookTimeout: 120_000,
};

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          ...shared,
          name: 'pglite',
          include: [
            'shared/src/**/*.test.ts',
            'control-plane/src/**/*.test.ts',
            'agent/src/**/*.test.ts',
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
                include: ['control-plane/src/**/*.test.ts', 'test/**/*.db.test.ts'],
                env: { ANVIL_TEST_DB: 'postgres' },
              },
            },
          ]
        : []),
    ],
  },
});

import { defineConfig } from 'prisma/config';

// Used by `prisma generate` (and `prisma migrate deploy` where Prisma's engines can be downloaded).
// At run time the control plane applies migrations itself (src/db/migrator.ts).
export default defineConfig({
  schema: 'prisma/schema.prisma',
  migrations: { path: 'prisma/migrations' },
  datasource: { url: process.env['DATABASE_URL'] ?? 'postgresql://localhost/anvil' },
});

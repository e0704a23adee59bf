import { newId } from '@anvil/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../testing/index.ts';
import { Prisma } from './generated/client.ts';
import { migrate, readMigrations } from './migrator.ts';

describe('migrator', () => {
  let database: TestDatabase;
  afterEach(async () => database.drop());

  it('migrates an empty database, records the migrations as Prisma does, and is idempotent', async () => {
    database = await createTestDatabase({ migrated: false });
    const applied = await database.db.session((sql) => migrate(sql));
    expect(applied).toEqual(readMigrations().map((m) => m.name));
    const rows = await database.db.sql.query<{ migration_name: string; checksum: string }>(
      'SELECT migration_name, checksum FROM "_prisma_migrations" ORDER BY migration_name',
    );
    expect(rows.map((r) => r.checksum)).toEqual(readMigrations().map((m) => m.checksum));
    expect(await database.db.session((sql) => migrate(sql))).toEqual([]);
  });

  it('refuses to start when an applied migration was edited', async () => {
    database = await createTestDatabase({ migrated: false });
    await database.db.session((sql) => migrate(sql));
    const edited = readMigrations().map((m, i) => (i === 0 ? { ...m, checksum: 'f'.repeat(64) } : m));
    await expect(database.db.session((sql) => migrate(sql, edited))).rejects.toThrow(
      /edited after it was applied/,
    );
  });

  it('rolls back a failing migration and records nothing', async () => {
    database = await createTestDatabase({ migrated: false });
    const broken = [
      ...readMigrations(),
      { name: '29990101000000_broken', sql: 'CREATE TABLE x (a int); SELECT nope;', checksum: 'x' },
    ];
    await expect(database.db.session((sql) => migrate(sql, broken))).rejects.toThrow(
      /29990101000000_broken failed/,
    );
    const tables = await database.db.sql.query(
      "SELECT 1 FROM information_schema.tables WHERE table_name = 'x'",
    );
    expect(tables).toHaveLength(0);
    expect(await database.db.session((sql) => migrate(sql))).toEqual([]);
  });

  it('round-trips every model of the schema through a freshly migrated database', async () => {
    database = await createTestDatabase();
    const prisma = database.db.prisma;
    const accountId = newId('acc');
    const userId = newId('usr');
    const at = new Date('2026-01-02T03:04:05.678Z');
    // One fixture per model: adding a model without a fixture fails the completeness check below.
    const fixtures: Record<string, () => Promise<[unknown, unknown]>> = {
      Account: async () => {
        const data = { id: accountId, name: 'Acme', tier: 'pro', createdAt: at };
        await prisma.account.create({ data });
        return [data, await prisma.account.findUniqueOrThrow({ where: { id: accountId } })];
      },
      User: async () => {
        const data = {
          id: userId,
          accountId,
          email: 'a@b.c',
          name: 'A',
          username: 'a',
          role: 'admin',
          status: 'active',
        };
        await prisma.user.create({ data });
        return [data, await prisma.user.findUniqueOrThrow({ where: { id: userId } })];
      },
      ApiKey: async () => {
        const data = {
          id: newId('key'),
          accountId,
          userId,
          name: 'k',
          description: 'd',
          type: 'read_write',
          environment: 'test',
          permissions: ['read', 'write'],
          scopes: ['accounts', 'clusters'],
          displayPrefix: 'anv_test_abcd',
          hash: 'h'.repeat(64),
          status: 'rotated',
          expiresAt: at,
          lastUsedAt: at,
          revokedAt: null,
          rotatedAt: at,
          graceUntil: at,
          replacedById: 'key_x',
          createdById: 'key_y',
        };
        await prisma.apiKey.create({ data });
        return [data, await prisma.apiKey.findUniqueOrThrow({ where: { id: data.id } })];
      },
      RateLimitCounter: async () => {
        const data = { bucket: 'acc:read', windowStart: at, count: 7, expiresAt: at };
        await prisma.rateLimitCounter.create({ data });
        return [
          data,
          await prisma.rateLimitCounter.findUniqueOrThrow({
            where: { bucket_windowStart: { bucket: 'acc:read', windowStart: at } },
          }),
        ];
      },
      RateLimitBoost: async () => {
        const data = {
          id: newId('boost'),
          accountId,
          multiplier: 2.5,
          reason: 'launch',
          startsAt: at,
          expiresAt: at,
          createdByKeyId: 'key_z',
        };
        await prisma.rateLimitBoost.create({ data });
        return [data, await prisma.rateLimitBoost.findUniqueOrThrow({ where: { id: data.id } })];
      },
      ApiRequest: async () => {
        const data = {
          accountId,
          keyId: 'key_q',
          method: 'GET',
          route: '/v2/auth/verify',
          statusCode: 200,
          durationMs: 1.25,
          createdAt: at,
        };
        const created = await prisma.apiRequest.create({ data });
        return [data, await prisma.apiRequest.findUniqueOrThrow({ where: { id: created.id } })];
      },
    };
    const models = Object.values(Prisma.ModelName).sort();
    const covered = Object.keys(fixtures).sort();
    const missing = models.filter((m) => !covered.includes(m));
    expect(missing, `models without a round-trip fixture: ${missing.join(', ')}`).toEqual([]);
    for (const model of Object.keys(fixtures)) {
      const [written, read] = await fixtures[model]!();
      expect(read, model).toMatchObject(written as object);
    }
  });
});

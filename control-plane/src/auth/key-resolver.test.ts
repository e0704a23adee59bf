import { generateApiKey, hashApiKey, KEY_SCOPES, newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../logger.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { waitFor } from '../testing/wait.ts';
import { bootstrapOwner } from './bootstrap.ts';
import { systemClock } from './clock.ts';
import { KeyResolver } from './key-resolver.ts';

/**
 * A well-formed key the database does not hold (valid checksum, random body) is remembered as unknown:
 * a flood of it costs one query, not one per request. Creating a key clears that memory here and, by
 * notification, in every other process sharing the database.
 */
describe('key resolver: unknown keys cached negatively', () => {
  let database: TestDatabase;
  let accountId: string;
  let userId: string;
  let lookups = 0;
  /** Keys asked for by each batched re-read. */
  const batchLookups: number[] = [];

  /** The database as a resolver sees it, counting key lookups. */
  const counted = () =>
    new Proxy(database.db, {
      get(target, property) {
        if (property !== 'prisma') return Reflect.get(target, property);
        const prisma = target.prisma;
        return new Proxy(prisma, {
          get(p, name) {
            if (name !== 'apiKey') return Reflect.get(p, name);
            return {
              findUnique: (args: Parameters<typeof prisma.apiKey.findUnique>[0]) => {
                lookups += 1;
                return prisma.apiKey.findUnique(args);
              },
              findMany: (args: Parameters<typeof prisma.apiKey.findMany>[0]) => {
                batchLookups.push(((args?.where?.hash as { in: string[] }) ?? { in: [] }).in.length);
                return prisma.apiKey.findMany(args);
              },
            };
          },
        });
      },
    });

  beforeAll(async () => {
    database = await createTestDatabase();
    const boot = await bootstrapOwner(database.db, {
      ownerEmail: 'owner@example.com',
      bootstrapApiKey: null,
    });
    accountId = boot.accountId;
    userId = boot.userId;
  });
  afterAll(async () => database.drop());

  async function insertKey(value: string): Promise<string> {
    const row = await database.db.prisma.apiKey.create({
      data: {
        id: newId('key'),
        accountId,
        userId,
        name: 'late',
        type: 'read',
        environment: 'live',
        permissions: ['read'],
        scopes: [...KEY_SCOPES],
        displayPrefix: value.slice(0, 12),
        hash: hashApiKey(value),
      },
    });
    return row.id;
  }

  it('asks the database once for a flood of the same unknown key', async () => {
    const resolver = new KeyResolver({ db: counted() as never, clock: systemClock });
    const key = `Bearer ${generateApiKey('live')}`;
    lookups = 0;
    for (let i = 0; i < 200; i++) {
      await expect(resolver.resolve(key)).rejects.toMatchObject({
        status: 401,
        details: { reason: 'unknown' },
      });
      expect(() => resolver.resolveCached(key)).toThrow(/invalid API key/);
    }
    expect(lookups).toBe(1);
  });

  it('forgets unknown keys when a key is created, in this process and in others', async () => {
    const here = new KeyResolver({ db: counted() as never, clock: systemClock });
    const there = new KeyResolver({ db: counted() as never, clock: systemClock });
    await here.start();
    await there.start();
    try {
      const value = generateApiKey('live');
      for (const resolver of [here, there])
        await expect(resolver.resolve(`Bearer ${value}`)).rejects.toMatchObject({ status: 401 });
      // The practically impossible case the clearing is for: the very key is created after all.
      await insertKey(value);
      await here.keyCreated();
      expect((await here.resolve(`Bearer ${value}`)).userId).toBe(userId);
      await waitFor('the other process forgets the unknown key', async () => {
        try {
          return (await there.resolve(`Bearer ${value}`)).userId === userId;
        } catch {
          return false;
        }
      });
    } finally {
      await here.stop();
      await there.stop();
    }
  });

  it('logs a failed write-back of last-used times and writes them at the next flush', async () => {
    // The database refuses the first write-back (as during a failover); the next one gets through.
    let failures = 1;
    const flaky = new Proxy(database.db, {
      get(target, property) {
        if (property !== 'sql') return Reflect.get(target, property);
        return new Proxy(target.sql, {
          get(sql, name) {
            if (name !== 'query') return Reflect.get(sql, name);
            return (text: string, params?: unknown[]) => {
              if (text.includes('last_used_at') && failures-- > 0)
                return Promise.reject(new Error('connection terminated'));
              return sql.query(text, params);
            };
          },
        });
      },
    });
    const warnings: string[] = [];
    const fields: Record<string, unknown>[] = [];
    const resolver = new KeyResolver({
      db: flaky as never,
      clock: systemClock,
      lastUsedFlushMs: 20,
      logger: {
        ...silentLogger,
        warn: (obj, msg) => {
          fields.push(obj as Record<string, unknown>);
          warnings.push(msg);
        },
      },
    });
    const value = generateApiKey('live');
    await insertKey(value);
    const { keyId } = await resolver.resolve(`Bearer ${value}`);
    await resolver.start();
    try {
      await waitFor('the failed flush is logged', async () => warnings.length > 0);
      expect(warnings[0]).toMatch(/last-used times failed; retried/);
      expect(fields[0]).toMatchObject({ keys: 1, keyIds: [keyId] });
      await waitFor('the retried flush writes the time', async () => {
        const row = await database.db.prisma.apiKey.findUnique({ where: { id: keyId } });
        return row?.lastUsedAt !== null;
      });
    } finally {
      await resolver.stop();
    }
  });

  it('re-reads the keys in use together in the background, so none expires under a request', async () => {
    const resolver = new KeyResolver({
      db: counted() as never,
      clock: systemClock,
      // No timer during the test: it re-reads when told to, as the timer would.
      cacheRefreshMs: 3_600_000,
      cacheTtlMs: 3_600_000,
    });
    const values = [generateApiKey('live'), generateApiKey('live'), generateApiKey('live')];
    for (const value of values) await insertKey(value);
    for (const value of values) await resolver.resolve(`Bearer ${value}`);
    lookups = 0;
    batchLookups.length = 0;
    try {
      for (let round = 0; round < 2; round++) {
        for (const value of values) expect(resolver.resolveCached(`Bearer ${value}`)).toBeDefined();
        await resolver.refreshCached();
      }
      // Every request kept its key in use; the three were re-read by one query each time, never one by one.
      expect(batchLookups).toEqual([3, 3]);
      // Keys nobody used since the last re-read are not re-read (they age out at cacheTtlMs).
      await resolver.refreshCached();
      expect(batchLookups).toEqual([3, 3]);
      for (const value of values) expect(resolver.resolveCached(`Bearer ${value}`)).toBeDefined();
      expect(lookups).toBe(0);
    } finally {
      await resolver.stop();
    }
  });

  it('stops a key revoked without a notification at the next re-read, long before its entry expires', async () => {
    // A missed notification (the listening connection dropped): the background re-read is the fallback.
    const resolver = new KeyResolver({
      db: counted() as never,
      clock: systemClock,
      // No timer during the test: it re-reads when told to, as the timer would.
      cacheRefreshMs: 3_600_000,
      cacheTtlMs: 3_600_000,
    });
    const value = generateApiKey('live');
    const keyId = await insertKey(value);
    await resolver.resolve(`Bearer ${value}`);
    try {
      await database.db.prisma.apiKey.update({ where: { id: keyId }, data: { status: 'revoked' } });
      expect(resolver.resolveCached(`Bearer ${value}`)?.keyId).toBe(keyId);
      await resolver.refreshCached();
      expect(() => resolver.resolveCached(`Bearer ${value}`)).toThrow(/revoked/);
    } finally {
      await resolver.stop();
    }
  });

  it('refuses a key revoked in another process at once, while its re-read was in flight here', async () => {
    let releaseRead: () => void = () => {};
    let held = false;
    let readStarted: () => void = () => {};
    const started = new Promise<void>((resolve) => {
      readStarted = resolve;
    });
    // The batched re-read here is held until the revocation has been announced, then answers the old row.
    const slow = new Proxy(database.db, {
      get(target, property) {
        if (property !== 'prisma') return Reflect.get(target, property);
        return new Proxy(target.prisma, {
          get(p, name) {
            if (name !== 'apiKey') return Reflect.get(p, name);
            return {
              findUnique: (args: Parameters<typeof p.apiKey.findUnique>[0]) => p.apiKey.findUnique(args),
              findMany: async (args: Parameters<typeof p.apiKey.findMany>[0]) => {
                const rows = await p.apiKey.findMany(args);
                if (held) return rows;
                held = true;
                readStarted();
                await new Promise<void>((resolve) => {
                  releaseRead = resolve;
                });
                return rows;
              },
            };
          },
        });
      },
    });
    const here = new KeyResolver({ db: slow as never, clock: systemClock, cacheRefreshMs: 3_600_000 });
    const there = new KeyResolver({ db: database.db, clock: systemClock });
    await here.start();
    await there.start();
    const value = generateApiKey('live');
    const keyId = await insertKey(value);
    try {
      await here.resolve(`Bearer ${value}`);
      await there.resolve(`Bearer ${value}`);
      const reread = here.refreshCached();
      await started;
      await database.db.prisma.apiKey.update({ where: { id: keyId }, data: { status: 'revoked' } });
      await there.invalidate();
      await waitFor('this process hears the revocation', async () => {
        await expect(here.resolve(`Bearer ${value}`)).rejects.toMatchObject({
          details: { reason: 'revoked' },
        });
        return true;
      });
      // The re-read that started before the revocation answers the active row: it must not bring it back.
      releaseRead();
      await reread;
      await expect(here.resolve(`Bearer ${value}`)).rejects.toMatchObject({ details: { reason: 'revoked' } });
    } finally {
      releaseRead();
      await here.stop();
      await there.stop();
    }
  });
});

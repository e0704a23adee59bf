import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../db/index.ts';
import { createTestDatabase, type TestDatabase } from '../testing/database.ts';
import { AccountIpPolicy } from './settings-ip-policy.ts';

/**
 * The address lists the request guard enforces are cached per account and re-read together in the
 * background, so a busy control plane asks the database once per interval for all accounts in use rather
 * than once per account and expiry with a request waiting (issue 21). Changes notify every process; the
 * re-read is the fallback for a missed notification.
 */
describe('account address lists: re-read in the background', () => {
  let database: TestDatabase;
  const accounts: string[] = [];
  const reads: number[] = [];

  /** The database as the policy sees it, counting settings reads (accounts asked per query). */
  const counted = (): Database =>
    new Proxy(database.db, {
      get(target, property) {
        if (property !== 'prisma') return Reflect.get(target, property);
        return new Proxy(target.prisma, {
          get(prisma, name) {
            if (name !== 'accountSettings') return Reflect.get(prisma, name);
            return {
              findMany: (args: Parameters<typeof prisma.accountSettings.findMany>[0]) => {
                reads.push(((args?.where?.accountId ?? { in: [] }) as { in: string[] }).in.length);
                return prisma.accountSettings.findMany(args);
              },
            };
          },
        });
      },
    });

  const list = (ips: string[]) => ({
    security: { api_access: { require_ip_whitelist: true, ip_whitelist: ips } },
  });

  beforeAll(async () => {
    database = await createTestDatabase();
    for (let i = 0; i < 3; i++) {
      const id = newId('acc');
      await database.db.prisma.account.create({ data: { id, name: `ip ${i}`, tier: 'pro' } });
      accounts.push(id);
    }
    await database.db.prisma.accountSettings.create({
      data: { accountId: accounts[0]!, data: list(['192.0.2.1']), updatedAt: new Date() },
    });
  });
  afterAll(async () => database.drop());

  it('re-reads every list in use with one query, and enforces a change it finds there', async () => {
    const policy = new AccountIpPolicy(counted());
    try {
      for (const account of accounts) await policy.check(account, '198.51.100.7').catch(() => {});
      reads.length = 0;
      // Cached: decided without a promise.
      expect(policy.admit(accounts[0]!, '192.0.2.1')).toBeNull();
      expect(policy.admit(accounts[1]!, '198.51.100.7')).toBeNull();
      expect(policy.admit(accounts[2]!, '198.51.100.7')).toBeNull();
      // A change that was never announced (a lost notification) is found by the next re-read.
      await database.db.prisma.accountSettings.create({
        data: { accountId: accounts[1]!, data: list(['192.0.2.9']), updatedAt: new Date() },
      });
      await policy.refreshCached();
      expect(reads).toEqual([3]);
      expect(policy.admit(accounts[1]!, '198.51.100.7')).toMatchObject({ code: 'IP_NOT_ALLOWED' });
      expect(policy.admit(accounts[1]!, '192.0.2.9')).toBeNull();
      expect(policy.admit(accounts[0]!, '198.51.100.7')).toMatchObject({ code: 'IP_NOT_ALLOWED' });
    } finally {
      await policy.stop();
    }
  });
});

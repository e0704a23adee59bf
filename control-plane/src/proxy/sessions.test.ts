import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SessionAccessCheck } from '../access-revocation/access-check.ts';
import { AccessRevocations } from '../access-revocation/revocations.ts';
import { AccessControl } from '../accounts/access.ts';
import { AuditLog } from '../accounts/audit.ts';
import { ClusterAccess } from '../clusters/access.ts';
import type { PrismaClient } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { openPostgres } from '../db/index.ts';
import { clusterRow } from '../testing/cluster-row.ts';
import { createTestDatabase, ManualClock, type TestDatabase, testLogger } from '../testing/index.ts';
import { ProxySessions } from './sessions.ts';

describe('ProxySessions', () => {
  let database: TestDatabase;
  let other: Database;
  let userId: string;
  const clusterId = newId('cluster');
  const clock = new ManualClock(new Date('2026-05-01T10:00:00.000Z'));

  beforeEach(async () => {
    database = await createTestDatabase();
    const prisma = database.db.prisma;
    const accountId = newId('acc');
    userId = newId('usr');
    await prisma.account.create({ data: { id: accountId, name: 'A' } });
    await prisma.user.create({ data: { id: userId, accountId, email: 'a@b.c' } });
    await prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId, ownerId: userId, name: 'sessions' }),
    });
    await prisma.proxySettings.create({ data: { clusterId, maxConcurrentSessions: 1 } });
    // On PostgreSQL the second process has its own connections (PGlite has one connection for all).
    other = database.url ? openPostgres(database.url, 2) : database.db;
  });
  afterEach(async () => {
    if (other !== database.db) await other.close();
    await database.drop();
  });

  /**
   * The database as a process sees it, with every session count answered only after `ms`: two logins
   * that both counted before either stored its session would both find room.
   */
  function slowCounts(db: Database, ms: number): Database {
    const prisma = db.prisma.$extends({
      query: {
        proxySession: {
          async count({ args, query }) {
            const counted = await query(args);
            await new Promise((resolve) => setTimeout(resolve, ms));
            return counted;
          },
        },
      },
    }) as unknown as PrismaClient;
    return { ...db, prisma };
  }

  it('lets no more than max_concurrent_sessions logins through when two processes redeem at once', async () => {
    const sessions = (db: Database) => {
      const revocations = new AccessRevocations(db, testLogger());
      const clusters = new ClusterAccess(db, new AccessControl(db, clock, new AuditLog(db, clock)));
      const check = new SessionAccessCheck(db, clock, clusters, revocations);
      return new ProxySessions(db, clock, check, revocations, testLogger());
    };
    const a = sessions(slowCounts(database.db, 300));
    const b = sessions(slowCounts(other, 300));
    const ticket = async () =>
      (await a.issueTicket({ clusterId, internalPort: 8080, userId, keyId: 'key_a' })).ticket;
    const [first, second] = [await ticket(), await ticket()];
    const outcomes = await Promise.allSettled([
      a.redeem(first, clusterId, 8080, 60),
      b.redeem(second, clusterId, 8080, 60),
    ]);
    const redeemed = outcomes.filter((o) => o.status === 'fulfilled' && o.value !== null);
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(redeemed).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect((refused[0] as PromiseRejectedResult).reason).toMatchObject({
      code: 'RATE_LIMITED',
      details: { reason: 'max_concurrent_sessions', max_concurrent_sessions: 1 },
    });
    expect(await database.db.prisma.proxySession.count({ where: { kind: 'session' } })).toBe(1);
  });
});

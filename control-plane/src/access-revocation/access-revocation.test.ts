import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AccessControl } from '../accounts/access.ts';
import { AuditLog } from '../accounts/audit.ts';
import { ClusterAccess } from '../clusters/access.ts';
import type { Database } from '../db/index.ts';
import { openPostgres } from '../db/index.ts';
import { clusterRow } from '../testing/cluster-row.ts';
import { createTestDatabase, ManualClock, type TestDatabase, testLogger, waitFor } from '../testing/index.ts';
import { SessionAccessCheck, VERDICT_CACHE_MS } from './access-check.ts';
import { LiveSessions } from './live-sessions.ts';
import { AccessRevocations, type Revocation } from './revocations.ts';

describe('access revocation', () => {
  let database: TestDatabase;
  /** A second process's connections (PostgreSQL); on PGlite the one database, as there is one process. */
  let other: Database;
  const clock = new ManualClock(new Date('2026-05-01T10:00:00.000Z'));
  const accountId = newId('acc');
  const userId = newId('usr');
  const clusterId = newId('cluster');
  const keyId = newId('key');

  beforeEach(async () => {
    database = await createTestDatabase();
    const prisma = database.db.prisma;
    await prisma.account.create({ data: { id: accountId, name: 'A' } });
    await prisma.user.create({ data: { id: userId, accountId, email: 'a@b.c', role: 'developer' } });
    await prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId, ownerId: userId, name: 'c' }),
    });
    await prisma.apiKey.create({
      data: {
        id: keyId,
        accountId,
        userId,
        name: 'k',
        type: 'user',
        environment: 'live',
        permissions: ['read', 'write'],
        scopes: ['clusters'],
        displayPrefix: 'anv_live_x',
        hash: newId('key').replace('key_', 'hash_'),
      },
    });
    other = database.url ? openPostgres(database.url, 2) : database.db;
  });
  afterEach(async () => {
    if (other !== database.db) await other.close();
    await database.drop();
  });

  const checkOn = (db: Database, revocations: AccessRevocations) =>
    new SessionAccessCheck(
      db,
      clock,
      new ClusterAccess(db, new AccessControl(db, clock, new AuditLog(db, clock))),
      revocations,
    );
  const grant = { accountId, userId, clusterId, permission: 'write' as const, apiKeyId: keyId };

  it('delivers a revocation to the publishing process at once and to another process over the database', async () => {
    const here = new AccessRevocations(database.db, testLogger());
    const there = new AccessRevocations(other, testLogger());
    await here.start();
    await there.start();
    const heardHere: Revocation[] = [];
    const heardThere: Revocation[] = [];
    here.subscribe((r) => heardHere.push(r));
    there.subscribe((r) => heardThere.push(r));
    const revocation: Revocation = { accountId, reason: 'key_revoked', keyId };
    await here.publish(revocation);
    expect(heardHere).toEqual([revocation]);
    await waitFor('the other process heard it', () => heardThere.length === 1, 30_000);
    expect(heardThere).toEqual([revocation]);
    // The publisher does not hear its own notice a second time.
    expect(heardHere).toHaveLength(1);
    await here.stop();
    await there.stop();
  });

  it('re-checks key, member and cluster access, trusting a verdict a few seconds at most', async () => {
    const revocations = new AccessRevocations(database.db, testLogger());
    const check = checkOn(database.db, revocations);
    expect(await check.check(grant)).toEqual({ allowed: true });
    // Revoked behind its back (no notice): the cached verdict holds only until VERDICT_CACHE_MS.
    await database.db.prisma.apiKey.update({ where: { id: keyId }, data: { status: 'revoked' } });
    expect(await check.check(grant)).toEqual({ allowed: true });
    clock.advance(VERDICT_CACHE_MS);
    expect(await check.check(grant)).toEqual({ allowed: false, reason: 'the API key was revoked' });
    await database.db.prisma.apiKey.update({ where: { id: keyId }, data: { status: 'active' } });
    clock.advance(VERDICT_CACHE_MS);
    expect(await check.check(grant)).toEqual({ allowed: true });
    // A revocation clears the cache at once.
    await database.db.prisma.user.update({ where: { id: userId }, data: { status: 'suspended' } });
    await revocations.publish({ accountId, reason: 'member_suspended', userId });
    expect(await check.check(grant)).toEqual({ allowed: false, reason: 'the member is suspended' });
  });

  it('caps sessions per account and kind, ends those a revocation concerns and spares the rest', async () => {
    const revocations = new AccessRevocations(database.db, testLogger());
    const check = checkOn(database.db, revocations);
    const live = new LiveSessions({
      revocations,
      check,
      limits: { terminal: 2, log_stream: 1, ssh: 1, proxy_websocket: 1 },
      logger: testLogger(),
    });
    const ended: string[] = [];
    const hold = (name: string, g: typeof grant | null = grant) =>
      live.hold({ kind: 'terminal', accountId, grant: g, end: (reason) => ended.push(`${name}: ${reason}`) });
    const first = hold('first');
    hold('public', null);
    expect(() => hold('third')).toThrow(
      expect.objectContaining({
        code: 'RATE_LIMITED',
        details: { reason: 'max_concurrent_sessions', session_kind: 'terminal', limit: 2 },
      }),
    );
    // Other kinds and other accounts have their own counts.
    live.hold({ kind: 'ssh', accountId, grant: null, end: () => {} });
    live.hold({ kind: 'terminal', accountId: newId('acc'), grant: null, end: () => {} });
    first();
    first();
    expect(live.count(accountId, 'terminal')).toBe(1);
    hold('again');
    // A revocation of another key leaves it; its own key's revocation ends it.
    await revocations.publish({ accountId, reason: 'key_revoked', keyId: newId('key') });
    await database.db.prisma.apiKey.update({ where: { id: keyId }, data: { status: 'revoked' } });
    await revocations.publish({ accountId, reason: 'key_revoked', keyId });
    await waitFor('the session ended', () => ended.length > 0, 30_000);
    expect(ended).toEqual(['again: the API key was revoked']);
  });
});

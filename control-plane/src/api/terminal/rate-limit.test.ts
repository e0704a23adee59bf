import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TIER_LIMITS } from '../../ratelimit/policy.ts';
import { clusterRow } from '../../testing/cluster-row.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';
import { tryUpgrade } from '../../testing/ws-upgrade.ts';

/**
 * The request guard never sees a WebSocket upgrade: the terminal's upgrade with an API key counts against
 * the account's read limit itself, and is refused with the spec's 429 once it is spent.
 */
describe('web terminal upgrades are rate limited', () => {
  let t: TestApp;
  let base: string;
  const clusterId = newId('cluster');

  const upgrade = () =>
    tryUpgrade(`${base.replace('http', 'ws')}/v1/clusters/${clusterId}/terminal`, {
      headers: { authorization: `Bearer ${t.ownerKey}` },
    });

  beforeAll(async () => {
    t = await createTestApp({ clock: new ManualClock(new Date('2026-05-01T10:20:00Z')) });
    base = await t.app.listen({ port: 0, host: '127.0.0.1' });
    await t.context.db.prisma.account.update({ where: { id: t.accountId }, data: { tier: 'free' } });
    await t.context.keys.invalidate();
    await t.context.db.prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId: t.accountId, ownerId: t.userId, name: 'terminal' }),
    });
  });

  afterAll(async () => {
    await t?.close();
  });

  it('counts each upgrade as a read and answers 429 RATE_LIMITED once the read limit is spent', async () => {
    const limit = TIER_LIMITS.free.read;
    // The cluster has no container: an admitted upgrade is refused further on, never with 429.
    for (let i = 0; i < limit; i++) {
      const admitted = await upgrade();
      expect(admitted.status, admitted.body).not.toBe(429);
    }
    const refused = await upgrade();
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body).error).toMatchObject({ code: 'RATE_LIMITED' });
    // The upgrades counted against the same limit as the API's reads.
    const read = await t.app.inject({ method: 'GET', url: '/v2/auth/verify', headers: t.auth() });
    expect(read.statusCode).toBe(429);
  });
});

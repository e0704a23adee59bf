import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ClusterAccess } from '../clusters/access.ts';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { ManualClock } from '../testing/clock.ts';
import { clusterRow } from '../testing/cluster-row.ts';
import { ACCESS_CACHE_MS } from './authorization.ts';

/** How the proxy's key check treats revocation and access changes (ProxyAuthorization.key). */
describe('proxy key authorisation', () => {
  const clock = new ManualClock();
  let t: TestApp;
  const clusterId = newId('cluster');
  const cookieClusterId = newId('cluster');

  beforeAll(async () => {
    t = await createTestApp({ clock });
    const owner = { accountId: t.accountId, ownerId: t.userId };
    await t.context.db.prisma.cluster.createMany({
      data: [
        clusterRow({ id: clusterId, ...owner, name: 'key-access' }),
        clusterRow({ id: cookieClusterId, ...owner, name: 'cookies' }),
      ],
    });
  });

  afterAll(async () => {
    await t?.close();
  });

  it('refuses a revoked key on the very next request, although its access was just checked', async () => {
    const owner = await t.context.keys.resolve(`Bearer ${t.ownerKey}`);
    const { key, value } = await t.context.apiKeys.create(owner, {
      name: 'proxy revocation',
      permissions: ['read'],
    });
    const header = `Bearer ${value}`;
    await expect(
      t.context.proxy.authorization.key(header, clusterId, '127.0.0.1', 'read'),
    ).resolves.toMatchObject({
      userId: t.userId,
    });
    // Accepted again from the caches (the key resolver's and the proxy's access verdict).
    await expect(
      t.context.proxy.authorization.key(header, clusterId, '127.0.0.1', 'read'),
    ).resolves.toBeTruthy();
    await t.context.apiKeys.revoke(owner, key.id);
    await expect(
      t.context.proxy.authorization.key(header, clusterId, '127.0.0.1', 'read'),
    ).rejects.toMatchObject({
      code: 'UNAUTHORIZED',
    });
    // Any case of the scheme names the same key.
    await expect(
      t.context.proxy.authorization.key(`bearer  ${value}`, clusterId, '127.0.0.1', 'read'),
    ).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('stops trusting a cluster access verdict after ACCESS_CACHE_MS', async () => {
    const header = `Bearer ${t.ownerKey}`;
    await expect(
      t.context.proxy.authorization.key(header, clusterId, '127.0.0.1', 'read'),
    ).resolves.toBeTruthy();
    await t.context.db.prisma.cluster.update({ where: { id: clusterId }, data: { deletedAt: clock.now() } });
    // Within the bound the verdict stands (no database query per proxied request)…
    clock.advance(ACCESS_CACHE_MS - 1);
    await expect(
      t.context.proxy.authorization.key(header, clusterId, '127.0.0.1', 'read'),
    ).resolves.toBeTruthy();
    // …past it the cluster is asked for again and is gone.
    clock.advance(1);
    await expect(
      t.context.proxy.authorization.key(header, clusterId, '127.0.0.1', 'read'),
    ).rejects.toMatchObject({
      code: 'CLUSTER_NOT_FOUND',
    });
  });

  it('checks a login cookie once, at the port level, and ends a session whose key is revoked', async () => {
    const owner = await t.context.keys.resolve(`Bearer ${t.ownerKey}`);
    const { key } = await t.context.apiKeys.create(owner, {
      name: 'proxy cookie',
      permissions: ['read', 'write'],
    });
    const sessions = t.context.proxy.sessions;
    const { ticket } = await sessions.issueTicket({
      clusterId: cookieClusterId,
      internalPort: 8080,
      userId: t.userId,
      keyId: key.id,
    });
    const { cookie } = (await sessions.redeem(ticket, cookieClusterId, 8080, 60))!;
    const cluster = { id: cookieClusterId, accountId: t.accountId };
    const decisions = vi.spyOn(ClusterAccess.prototype, 'decideForMember');
    try {
      // One decision covers the session's access and the port's write level (it took one per level).
      await expect(
        t.context.proxy.authorization.cookie(cookie, cluster, 8080, 'write'),
      ).resolves.toMatchObject({
        userId: t.userId,
        keyId: key.id,
        role: 'owner',
      });
      expect(decisions).toHaveBeenCalledTimes(1);
      expect(decisions.mock.calls[0]?.[2]).toBe('write');
    } finally {
      decisions.mockRestore();
    }
    // Another port's cookie is no session here.
    await expect(t.context.proxy.authorization.cookie(cookie, cluster, 8081, 'write')).resolves.toBeNull();
    await t.context.apiKeys.revoke(owner, key.id);
    await expect(t.context.proxy.authorization.cookie(cookie, cluster, 8080, 'write')).resolves.toBeNull();
    expect(await sessions.find(cookie)).toBeNull();
  });
});

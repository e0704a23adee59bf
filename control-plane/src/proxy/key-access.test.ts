import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { ManualClock } from '../testing/clock.ts';
import { ACCESS_CACHE_MS } from './service.ts';

/** How the proxy's key check treats revocation and access changes (ProxyService.authorizeKey). */
describe('proxy key authorisation', () => {
  const clock = new ManualClock();
  let t: TestApp;
  const clusterId = newId('cluster');

  beforeAll(async () => {
    t = await createTestApp({ clock });
    await t.context.db.prisma.cluster.create({
      data: {
        id: clusterId,
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'key-access',
        status: 'running',
        gpuType: 'H100',
        gpuCount: 1,
        cpuCores: 1,
        memoryGb: 1,
        storageGb: 1,
        dockerImage: 'anvil-test/busybox:latest',
        command: [],
        ports: [],
        gpuIndices: [],
      },
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
    await expect(t.context.proxy.authorizeKey(header, clusterId, '127.0.0.1', 'read')).resolves.toMatchObject(
      {
        userId: t.userId,
      },
    );
    // Accepted again from the caches (the key resolver's and the proxy's access verdict).
    await expect(t.context.proxy.authorizeKey(header, clusterId, '127.0.0.1', 'read')).resolves.toBeTruthy();
    await t.context.apiKeys.revoke(owner, key.id);
    await expect(t.context.proxy.authorizeKey(header, clusterId, '127.0.0.1', 'read')).rejects.toMatchObject({
      code: 'UNAUTHORIZED',
    });
    // Any case of the scheme names the same key.
    await expect(
      t.context.proxy.authorizeKey(`bearer  ${value}`, clusterId, '127.0.0.1', 'read'),
    ).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('stops trusting a cluster access verdict after ACCESS_CACHE_MS', async () => {
    const header = `Bearer ${t.ownerKey}`;
    await expect(t.context.proxy.authorizeKey(header, clusterId, '127.0.0.1', 'read')).resolves.toBeTruthy();
    await t.context.db.prisma.cluster.update({ where: { id: clusterId }, data: { deletedAt: clock.now() } });
    // Within the bound the verdict stands (no database query per proxied request)…
    clock.advance(ACCESS_CACHE_MS - 1);
    await expect(t.context.proxy.authorizeKey(header, clusterId, '127.0.0.1', 'read')).resolves.toBeTruthy();
    // …past it the cluster is asked for again and is gone.
    clock.advance(1);
    await expect(t.context.proxy.authorizeKey(header, clusterId, '127.0.0.1', 'read')).rejects.toMatchObject({
      code: 'CLUSTER_NOT_FOUND',
    });
  });
});

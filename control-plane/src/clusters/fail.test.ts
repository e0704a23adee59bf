import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { capturedLogger } from '../testing/captured-logs.ts';
import { clusterRow } from '../testing/cluster-row.ts';

/**
 * A failed cluster whose container cannot be told to stop is logged, not silently left running, and the
 * supervisor's next pass tries again.
 */
describe('failing a cluster', () => {
  let t: TestApp;
  const { logger, lines } = capturedLogger('info');

  beforeAll(async () => {
    t = await createTestApp({ logger });
  });
  afterAll(async () => t?.close());

  it('logs the container it could not stop, with the cluster id, and stops it at the next pass', async () => {
    // A running cluster whose workload row is gone: setting it to stopped fails (workload not found).
    const id = newId('cluster');
    await t.context.db.prisma.cluster.create({
      data: clusterRow({ id, accountId: t.accountId, ownerId: t.userId, name: 'failing' }),
    });
    await t.context.clusters.service.fail(id, 'GPU 0 failed');
    const row = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
    expect(row.status).toBe('error');
    const logged = lines.find((l) => l['clusterId'] === id && l['level'] === 50);
    expect(logged?.['msg']).toMatch(/container could not be set to stopped/);
    expect(logged?.['component']).toBe('clusters');

    // The supervisor's next pass tries again: now that the workload is there, its container is stopped.
    await t.context.db.prisma.host.create({
      data: {
        id: `host_${id}`,
        name: 'gpu-fail',
        hostname: 'gpu-fail.internal',
        credentialHash: 'f'.repeat(64),
      },
    });
    await t.context.db.prisma.workload.create({
      data: {
        id,
        hostId: `host_${id}`,
        kind: 'cluster',
        ownerAccountId: t.accountId,
        spec: { workloadId: id },
        desired: 'running',
      },
    });
    await t.context.clusters.supervisor.pass();
    const workload = await t.context.db.prisma.workload.findUniqueOrThrow({ where: { id } });
    expect(workload.desired).toBe('stopped');
    expect((await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } })).status).toBe('error');
  });
});

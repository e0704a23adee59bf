import { createMessage } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { insertSimulatedHosts } from '../scheduler/simulated-hosts.ts';
import { call } from '../testing/accounts.ts';
import { createTestApp, type TestApp } from '../testing/app.ts';

describe('cluster supervisor', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await createTestApp();
    await insertSimulatedHosts(t.context.db, { prefix: 'sv', count: 1, gpusPerHost: 2, region: 'us-east-1' });
  });

  afterAll(async () => {
    await t?.close();
  });

  it('makes a starting cluster running when its agent reports the container running, without waiting for a pass', async () => {
    const created = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name: 'kicked', docker_image: 'busybox', gpu_type: 'H100' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().data.id as string;
    const { hostId } = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
    const { supervisor } = t.context.clusters;
    const kick = vi.spyOn(supervisor, 'kick');
    // No timed pass from here on: whatever happens below happens because the report arrived.
    await supervisor.stop();
    const report = (workloadId: string, from = hostId!) =>
      t.context.fleet.workloads.recordContainerState(
        from,
        createMessage('container_state', {
          workloadId,
          containerId: 'c0ffee',
          phase: 'running',
          containerState: 'running',
          exitCode: null,
          error: null,
          at: Date.now(),
        }),
      );
    // Another kind of workload's report is none of the clusters' business.
    await report('wl_other');
    expect(kick).not.toHaveBeenCalled();
    // Nor does a report about it from a host it is not placed on.
    await report(id, 'host_elsewhere');
    expect((await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } })).status).toBe('starting');
    kick.mockClear();
    await report(id);
    expect(kick).toHaveBeenCalledTimes(1);
    const row = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
    expect(row.status).toBe('running');
    expect(row.sessionStartedAt).not.toBeNull();
    kick.mockRestore();
    supervisor.start();
  });
});

import { createMessage } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeWorkerSession } from '../../billing/worker-sessions.ts';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { call } from '../../testing/accounts.ts';
import { createEndpoint, placedWorker } from '../../testing/endpoints.ts';
import { createTestApp, ManualClock, type TestApp, waitFor } from '../../testing/index.ts';

const NOW = new Date('2026-11-24T12:00:00Z');
const MINUTE = 60_000;

/**
 * Endpoint workers bill their uptime (as RunPod bills active workers): from when the worker's container
 * runs until the worker is removed, per GPU at the price fixed when it was placed, whether it serves jobs
 * or idles. Open sessions count up to now in the reports; removal closes them into one record. Hosts are
 * simulated rows (no agent): the test reports the container running as the agent gateway would.
 */
describe('endpoint worker uptime billing', () => {
  let t: TestApp;
  let clock: ManualClock;

  beforeAll(async () => {
    clock = new ManualClock(NOW);
    t = await createTestApp({ clock, env: { ANVIL_USAGE_ALERT_SECONDS: '0' } });
    await insertSimulatedHosts(t.context.db, { prefix: 'bill', count: 1, gpusPerHost: 2 });
    await t.context.clusters.prices.set({ H100: 3 });
  });
  afterAll(async () => t?.close());

  const endpointsReport = async () => {
    const r = await call(t, { url: '/v2/accounts/usage/endpoints?period=1d' });
    expect(r.statusCode, r.body).toBe(200);
    return r.json();
  };

  it('bills a worker from its container start until it is removed, not only its executions', async () => {
    const endpointId = await createEndpoint(t, 'billed', { gpuCount: 2 });
    const prisma = t.context.db.prisma;
    const worker = await placedWorker(t, endpointId);
    // The rate is fixed at placement: 2 GPUs x 3 USD. A later price change is for later workers.
    expect(worker.hourlyRate).toBe(6);
    await t.context.clusters.prices.set({ H100: 100 });

    // Placed but its container not running yet (image pull): nothing billed.
    expect((await endpointsReport()).endpointUsage).toEqual([]);

    // The agent reports the container running since NOW.
    await prisma.workload.update({
      where: { id: worker.id },
      data: {
        phase: 'running',
        actualStatus: { phase: 'running', startedAt: NOW.toISOString(), exitCode: null, error: null },
        actualAt: NOW,
      },
    });
    t.context.endpoints.supervisor.kick();
    await waitFor('the billing session opened', async () => {
      const row = await prisma.endpointWorker.findUniqueOrThrow({ where: { id: worker.id } });
      return row.billingStartedAt ? row : null;
    });

    // 12 minutes later, no job ever ran: the open session counts up to now (0.2 h x 6 USD/h).
    clock.advance(12 * MINUTE);
    const open = await endpointsReport();
    expect(open.endpointUsage).toHaveLength(1);
    expect(open.endpointUsage[0]).toMatchObject({
      endpointId,
      name: 'billed',
      executions: 0,
      computeHours: 0.4,
      cost: 1.2,
    });
    const summary = (await call(t, { url: '/v2/accounts/usage?period=1d' })).json();
    expect(summary.breakdown.compute).toMatchObject({ cost: 1.2, hours: 0.2 });

    // Deleting the endpoint removes the worker and closes its session at that moment.
    expect((await call(t, { method: 'DELETE', url: `/v2/endpoints/${endpointId}` })).statusCode).toBe(200);
    t.context.endpoints.supervisor.kick();
    await waitFor('the worker removed', async () => {
      const row = await prisma.endpointWorker.findUniqueOrThrow({ where: { id: worker.id } });
      return row.status === 'stopped' ? row : null;
    });
    const records = await prisma.usageRecord.findMany({
      where: { resourceId: endpointId, kind: 'gpu_compute' },
    });
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({
      resourceType: 'endpoint',
      kind: 'gpu_compute',
      gpuType: 'H100',
      gpuCount: 2,
      unit: 'hours',
      cost: 1.2,
      startedAt: NOW,
      endedAt: new Date(NOW.getTime() + 12 * MINUTE),
    });
    expect(records[0]?.metadata).toMatchObject({
      reason: 'stopped',
      worker_id: worker.id,
      hourly_rate: 6,
      host_id: worker.hostId,
    });

    // A second close (another replica, a retry) writes nothing.
    const again = await prisma.$transaction((tx) => closeWorkerSession(tx, worker, clock.now(), 'stopped'));
    expect(again).toBe(false);

    // Time after the removal costs nothing.
    clock.advance(30 * MINUTE);
    const closed = await endpointsReport();
    expect(closed.endpointUsage[0]).toMatchObject({ computeHours: 0.4, cost: 1.2 });
    expect(closed.summary.totalCost).toBe(1.2);
    const gpu = (await call(t, { url: '/v2/accounts/usage/gpu?period=1d' })).json();
    expect(gpu.gpuUsage).toEqual([
      expect.objectContaining({ gpuType: 'H100', totalHours: 0.4, totalCost: 1.2, sessions: 1 }),
    ]);
    expect(await prisma.usageRecord.count({ where: { resourceId: endpointId, kind: 'gpu_compute' } })).toBe(
      1,
    );
  });

  it('opens the session from the change that says the container runs, before any full report', async () => {
    const endpointId = await createEndpoint(t, 'billed-at-start');
    const prisma = t.context.db.prisma;
    const worker = await placedWorker(t, endpointId);
    // The agent's container_state message alone, as the gateway stores it: a worker may answer its
    // health check (and turn ready) before the next actual_state report, and must be billed by then.
    const startedAt = clock.now().toISOString();
    await t.context.fleet.workloads.recordContainerState(
      worker.hostId,
      createMessage('container_state', {
        workloadId: worker.id,
        containerId: 'c'.repeat(64),
        phase: 'running',
        containerState: 'running',
        exitCode: null,
        error: null,
        startedAt,
        at: clock.now().getTime(),
      }),
    );
    t.context.endpoints.supervisor.kick();
    const row = await waitFor('the billing session opened', async () => {
      const r = await prisma.endpointWorker.findUniqueOrThrow({ where: { id: worker.id } });
      return r.billingStartedAt ? r : null;
    });
    expect(row.billingStartedAt?.toISOString()).toBe(startedAt);
    expect((await call(t, { method: 'DELETE', url: `/v2/endpoints/${endpointId}` })).statusCode).toBe(200);
  });

  it('documents the rule in the OpenAPI descriptions of the usage and endpoint routes', async () => {
    const doc = (await t.app.inject({ url: '/openapi.json' })).json();
    const description = (path: string, method: string) =>
      (doc.paths[path]?.[method]?.description ?? '') as string;
    expect(description('/v2/accounts/usage/endpoints', 'get')).toMatch(/bill their uptime.*cost 0/s);
    expect(description('/v2/endpoints', 'post')).toMatch(/bill their uptime.*cost 0/s);
    expect(description('/v2/accounts/usage/gpu', 'get')).toMatch(/stored GPU samples/);
  });
});

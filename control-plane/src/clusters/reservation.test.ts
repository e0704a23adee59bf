import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reservationOf } from '../scheduler/reservations.ts';
import { insertSimulatedHosts } from '../scheduler/simulated-hosts.ts';
import { boostRateLimits, call } from '../testing/accounts.ts';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { waitFor } from '../testing/wait.ts';

/**
 * A pending multi-GPU cluster is not starved by small ones (scheduler/reservations.ts), through the API
 * and the supervisor: creates, deletes, and the pending placements the supervisor makes when GPUs free.
 */
describe('pending clusters: reservation for the head of the queue', () => {
  let t: TestApp;

  beforeAll(async () => {
    // The simulated host never sends a heartbeat: a grace period no loaded machine outlasts keeps it ready.
    t = await createTestApp({ env: { ANVIL_HOST_GRACE_SECONDS: '3600' } });
    await insertSimulatedHosts(t.context.db, { prefix: 'rs', count: 1, gpusPerHost: 8, region: 'us-east-1' });
    // POST /clusters is limited to 20 an hour per account (spec); this file creates more.
    await boostRateLimits(t);
  });

  afterAll(async () => {
    await t?.close();
  });

  const create = async (name: string, gpuCount = 1): Promise<string> => {
    const response = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name, docker_image: 'busybox', gpu_type: 'H100', gpu_count: gpuCount },
    });
    expect(response.statusCode, response.body).toBe(201);
    return response.json().data.id as string;
  };
  const remove = async (id: string) => {
    const response = await call(t, {
      method: 'DELETE',
      url: `/v1/clusters/${id}`,
      payload: { confirm_deletion: 'DELETE', wait_for_completion: true },
    });
    expect(response.json().data.deletion_progress, response.body).toMatchObject({ phase: 'completed' });
  };
  const row = (id: string) => t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });

  it('places a pending 8-GPU cluster once its host empties, while 1-GPU clusters keep arriving and leaving', async () => {
    const old: string[] = [];
    for (let i = 0; i < 8; i++) old.push(await create(`old-${i}`));
    for (const id of old) expect((await row(id)).status).toBe('starting');

    const big = await create('big', 8);
    expect(await row(big)).toMatchObject({
      status: 'pending',
      statusReason: 'waiting for 8 x H100 to free up',
    });
    expect(await reservationOf(t.context.db, big)).toBe('host_sim_rs_0');

    // One old cluster leaves, one new arrives, eight times. Each freed GPU is held for the big cluster:
    // neither the arrivals' creates nor the supervisor's placements of the queued ones may take it.
    const late: string[] = [];
    for (const [n, id] of old.entries()) {
      late.push(await create(`late-${n}`));
      await remove(id);
      for (const queued of late) {
        expect(await t.context.clusters.service.placePending(queued)).toBe(false);
        expect((await row(queued)).status).toBe('pending');
      }
      if (n < 7) expect((await row(big)).status).toBe('pending');
    }

    // All eight free: the supervisor places the big one (it was kicked by the last release).
    await waitFor('the big cluster placed', async () => (await row(big)).status === 'starting');
    expect(await row(big)).toMatchObject({ hostId: 'host_sim_rs_0', gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] });
    expect(await reservationOf(t.context.db, big)).toBeNull();
    for (const queued of late) expect((await row(queued)).status).toBe('pending');

    // It leaves: the small ones queued behind it are placed.
    await remove(big);
    await waitFor('the queued clusters placed', async () =>
      (await Promise.all(late.map(row))).every((cluster) => cluster.status === 'starting'),
    );
    const gpus = (await Promise.all(late.map(row))).flatMap((cluster) => cluster.gpuIndices);
    expect(gpus.sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    for (const id of late) await remove(id);
  });
});

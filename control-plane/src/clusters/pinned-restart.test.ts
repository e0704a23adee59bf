import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reservationOf } from '../scheduler/reservations.ts';
import { insertSimulatedHosts } from '../scheduler/simulated-hosts.ts';
import { call } from '../testing/accounts.ts';
import { createTestApp, type TestApp } from '../testing/app.ts';
import { waitFor } from '../testing/wait.ts';

/**
 * A stopped cluster started again goes back to the host holding its volume (scheduler/reservations.ts,
 * pinned clusters): while that host's GPUs are busy it waits in pending — not failed, not moved to a
 * free host — reserves its host so that younger requests cannot take the GPUs that free there, and the
 * supervisor places it there once they do.
 */
describe('pinned restart', () => {
  let t: TestApp;
  const HOME = 'host_sim_pin_0';
  const OTHER = 'host_sim_pin_1';

  beforeAll(async () => {
    t = await createTestApp();
    await insertSimulatedHosts(t.context.db, {
      prefix: 'pin',
      count: 2,
      gpusPerHost: 2,
      region: 'us-east-1',
    });
  });

  afterAll(async () => {
    await t?.close();
  });

  const create = async (name: string, gpuCount: number): Promise<string> => {
    const response = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name, docker_image: 'busybox', gpu_type: 'H100', gpu_count: gpuCount },
    });
    expect(response.statusCode, response.body).toBe(201);
    return response.json().data.id as string;
  };
  const row = (id: string) => t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });

  it('waits for its own host, keeps it reserved against younger requests, and is placed there when GPUs free', async () => {
    const restarted = await create('restarted', 2);
    expect(await row(restarted)).toMatchObject({ status: 'starting', hostId: HOME, gpuIndices: [0, 1] });
    // No agent runs simulated hosts' containers: the agent's report is what marks it running.
    await t.context.clusters.supervisor.markRunning(restarted);
    const stopped = await call(t, {
      method: 'POST',
      url: `/v1/clusters/${restarted}/stop`,
      payload: { wait_for_completion: true },
    });
    expect(stopped.statusCode, stopped.body).toBeLessThan(300);
    expect(await row(restarted)).toMatchObject({ status: 'stopped', hostId: HOME, gpuIndices: [] });

    // Its GPUs go to another cluster while it is stopped.
    const taker = await create('taker', 2);
    expect(await row(taker)).toMatchObject({ status: 'starting', hostId: HOME });

    // Started again: the other host is empty, but its volume is on HOME, so it waits there.
    const started = await call(t, { method: 'POST', url: `/v1/clusters/${restarted}/start` });
    expect(started.statusCode, started.body).toBeLessThan(300);
    expect(await row(restarted)).toMatchObject({
      status: 'pending',
      hostId: HOME,
      gpuIndices: [],
      statusReason: 'waiting for 2 x H100 to free up on the host holding its volume',
    });
    expect(await reservationOf(t.context.db, restarted)).toBe(HOME);

    // The other host fills; a younger 1-GPU request queues and may not reserve HOME.
    const filler = await create('filler', 2);
    expect(await row(filler)).toMatchObject({ status: 'starting', hostId: OTHER });
    const younger = await create('younger', 1);
    expect((await row(younger)).status).toBe('pending');
    expect(await reservationOf(t.context.db, younger)).not.toBe(HOME);
    expect(await reservationOf(t.context.db, restarted)).toBe(HOME);

    // HOME's GPUs free. The younger request tries first (as a create or another replica could): the
    // freed GPUs are held for the restarted cluster, so it gets none of them.
    await t.context.clusters.supervisor.stop();
    await t.context.clusters.service.fail(taker, 'container exited with code 0');
    expect(await t.context.clusters.service.placePending(younger)).toBe(false);
    expect(await row(younger)).toMatchObject({ status: 'pending', gpuIndices: [] });

    // The supervisor places the restarted cluster on its own host, on its own.
    t.context.clusters.supervisor.start();
    t.context.clusters.supervisor.kick();
    await waitFor('the restarted cluster placed', async () => (await row(restarted)).status === 'starting');
    expect(await row(restarted)).toMatchObject({ hostId: HOME, gpuIndices: [0, 1], statusReason: null });
    expect(await reservationOf(t.context.db, restarted)).toBeNull();
    expect((await row(younger)).status).toBe('pending');
  });
});

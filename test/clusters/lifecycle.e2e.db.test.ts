import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boostRateLimits, call } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';
import { ShiftedClock } from '../../control-plane/src/testing/clock.ts';
import type { RunningAgent } from '../agent/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from './harness.ts';

/**
 * Clusters end to end: the control plane over HTTP on loopback, a real agent (simulated 2xH100, the
 * only fake) running real containers in Docker.
 */
describe.skipIf(!dockerOrFail('test/clusters/lifecycle.e2e.db.test.ts'))(
  'cluster lifecycle with a real agent and Docker',
  () => {
    let fleet: ClusterFleet;
    let t: TestApp;
    /** The control plane's time: billing is checked across time skipped ahead, not slept through. */
    const clock = new ShiftedClock();
    let docker: Dockerode;
    let agent: RunningAgent;
    const snapshots: string[] = [];

    beforeAll(async () => {
      fleet = await startClusterFleet({}, {}, clock);
      ({ t, docker, agent } = fleet);
      await t.context.clusters.prices.set({ H100: 3.6 });
      await boostRateLimits(t);
    }, 300_000);

    afterAll(async () => {
      await fleet?.close();
      for (const image of snapshots)
        await docker
          .getImage(image)
          .remove({ force: true })
          .catch(() => {});
    });

    const get = async (id: string) => (await call(t, { url: `/v1/clusters/${id}` })).json().data;
    const waitStatus = (id: string, status: string, timeoutMs = 240_000) =>
      waitFor(
        `${id} ${status}`,
        async () => ((await get(id))?.status === status ? get(id) : null),
        timeoutMs,
      ).catch(async (error) => {
        const w = await t.context.db.prisma.workload.findUnique({ where: { id } });
        throw new Error(
          `${(error as Error).message}: cluster ${JSON.stringify(await get(id))} workload ${JSON.stringify(w)} host ${JSON.stringify(await t.context.db.prisma.host.findMany({ select: { id: true, state: true, desiredGeneration: true, ackedGeneration: true } }))}`,
        );
      });
    const containerOf = async (id: string) =>
      (await docker.listContainers({ all: true, filters: { label: [`anvil.workload=${id}`] } }))[0] ?? null;
    const volumeOf = (id: string) => join(agent.stateDir, 'volumes', id);
    const create = async (name: string, extra: Record<string, unknown> = {}) => {
      const r = await call(t, {
        method: 'POST',
        url: '/v1/clusters',
        payload: {
          name,
          docker_image: BUSYBOX_IMAGE,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          // Writes to its volume, and exits 2 s after SIGTERM (so the graceful-exit phase is visible).
          command:
            'echo started >> /workspace/marker; trap "sleep 2; exit 0" TERM; while true; do sleep 1; done',
          ports: [{ internal_port: 8080, description: 'web' }],
          ...extra,
        },
      });
      expect(r.statusCode, r.body).toBe(201);
      return r.json().data;
    };

    it('creates, runs, stops (billing frozen), starts again, places a pending cluster on delete, and deletes with the volume', {
      timeout: 600_000,
    }, async () => {
      const a = await create('alpha', { env: { GREETING: 'hi' } });
      expect(['starting', 'running']).toContain(a.status);
      const runningA = await waitStatus(a.id, 'running');
      expect(runningA.cost.hourly_rate).toBe(3.6);
      const containerA = await containerOf(a.id);
      expect(containerA?.State).toBe('running');
      const inspected = await docker.getContainer(containerA!.Id).inspect();
      expect(inspected.Config.Env).toEqual(
        expect.arrayContaining(['GREETING=hi', `ANVIL_CLUSTER_ID=${a.id}`]),
      );
      expect(inspected.Config.Env.some((e) => e.startsWith('NVIDIA_VISIBLE_DEVICES=GPU-'))).toBe(true);
      expect(runningA.port_mappings).toEqual([
        { internal_port: 8080, external_port: expect.any(Number), protocol: 'tcp' },
      ]);
      await waitFor('volume written', async () => existsSync(join(volumeOf(a.id), 'marker')) || null);

      const b = await create('bravo');
      await waitStatus(b.id, 'running');
      const c = await create('charlie');
      expect(c.status).toBe('pending');
      expect(c.status_reason).toMatch(/waiting for 1 x H100/);

      // Delete bravo: its container and volume go, and charlie takes its GPU.
      const bravoRow = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: b.id } });
      const del = await call(t, {
        method: 'DELETE',
        url: `/v1/clusters/${b.id}`,
        payload: { confirm_deletion: 'DELETE', wait_for_completion: true, timeout_minutes: 1 },
      });
      expect(del.statusCode, del.body).toBe(200);
      expect(del.json()).toMatchObject({
        success: true,
        data: {
          id: b.id,
          deletion_progress: { phase: 'completed', percentage: 100 },
          billing_preview: { currency: 'USD' },
        },
        meta: { request_id: expect.any(String), wait_for_completion: true },
      });
      expect(del.json().data.billing_preview.estimated_final_cost).toBeGreaterThanOrEqual(0);
      expect(await containerOf(b.id)).toBeNull();
      expect(existsSync(volumeOf(b.id))).toBe(false);
      expect((await call(t, { url: `/v1/clusters/${b.id}` })).statusCode).toBe(404);
      const charlie = await waitStatus(c.id, 'running');
      const charlieRow = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: c.id } });
      expect(charlieRow.gpuIndices).toEqual(bravoRow.gpuIndices);
      expect(charlie.status).toBe('running');

      // Stop alpha with a snapshot; the phase being executed is visible while it runs.
      const stop = await call(t, {
        method: 'POST',
        url: `/v1/clusters/${a.id}/stop`,
        payload: {
          save_state: true,
          snapshot_name: 'before-restart',
          grace_period_minutes: 1,
          stop_reason: 'test',
        },
      });
      expect(stop.statusCode, stop.body).toBe(202);
      const accepted = stop.json().data;
      expect(accepted).toMatchObject({
        status: 'stopping',
        stop_type: 'graceful',
        grace_period_minutes: 1,
        stop_progress: { total_steps: 6 },
        snapshot_creation: { enabled: true },
        cost_impact: { hourly_rate_saved: 3.6, billing_stopped_at: expect.any(String) },
        data_preservation: { volumes_preserved: true },
      });
      expect(accepted.cost_impact.session_cost_final).toBeGreaterThan(0);
      const phases = new Set<string>();
      const stopped = await waitFor(
        'alpha stopped',
        async () => {
          const now = await get(a.id);
          if (now.operation) phases.add(now.operation.phase);
          return now.status === 'stopped' ? now : null;
        },
        240_000,
        200,
      );
      expect(phases.has('waiting_for_graceful_exit')).toBe(true);
      expect(stopped.operation).toMatchObject({ kind: 'stop', phase: 'completed', percentage: 100 });
      expect(await containerOf(a.id)).toBeNull();
      expect(existsSync(join(volumeOf(a.id), 'marker'))).toBe(true);
      const snapshot = (await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: a.id } }))
        .operation as {
        snapshot: { snapshot_id: string; name: string; size_bytes: number };
      };
      snapshots.push(snapshot.snapshot.name);
      expect(snapshot.snapshot.name).toBe(`anvil-snapshots/${t.accountId}/${a.id}:before-restart`);
      expect((await docker.getImage(snapshot.snapshot.snapshot_id).inspect()).Id).toBe(
        snapshot.snapshot.snapshot_id,
      );

      // Billing frozen: the cost does not move while stopped; one usage record per closed session.
      expect(stopped.cost.current_session_cost).toBe(0);
      // 10 s on (well inside the hosts' 40 s grace): a running session would cost more by now.
      clock.advance(10_000);
      expect((await get(a.id)).cost.total_cost).toBe(stopped.cost.total_cost);
      expect(stopped.cost.total_cost).toBeCloseTo(accepted.cost_impact.session_cost_final, 6);
      const records = await t.context.db.prisma.usageRecord.findMany({
        where: { resourceId: a.id, kind: 'gpu_compute' },
      });
      expect(records).toHaveLength(1);
      expect(records[0]).toMatchObject({
        kind: 'gpu_compute',
        resourceType: 'cluster',
        unit: 'hours',
        gpuCount: 1,
        gpuType: 'H100',
      });
      expect(records[0]!.gpuHours).toBeCloseTo(records[0]!.quantity, 9);

      // Stop again: INVALID_STATE.
      const again = await call(t, { method: 'POST', url: `/v1/clusters/${a.id}/stop`, payload: {} });
      expect(again.json().error).toMatchObject({
        code: 'INVALID_STATE',
        details: { current_status: 'stopped', required_status: 'running' },
      });

      // Start: running again on the same host, with the same volume.
      const start = await call(t, { method: 'POST', url: `/v1/clusters/${a.id}/start` });
      expect(start.statusCode, start.body).toBe(200);
      await waitStatus(a.id, 'running');
      expect((await containerOf(a.id))?.State).toBe('running');
      await waitFor(
        'second start recorded',
        async () =>
          (await readFile(join(volumeOf(a.id), 'marker'), 'utf8')).split('\n').filter(Boolean).length === 2 ||
          null,
      );

      // Delete with a final snapshot; the container and the volume are gone.
      const delA = await call(t, {
        method: 'DELETE',
        url: `/v2/clusters/${a.id}`,
        payload: {
          confirm_deletion: 'DELETE',
          create_final_snapshot: true,
          snapshot_name: 'final',
          wait_for_completion: true,
          force: true,
        },
      });
      expect(delA.statusCode, delA.body).toBe(200);
      expect(delA.json()).toMatchObject({
        id: a.id,
        status: 'deleted',
        final_snapshot: { creating: true, snapshot_name: `anvil-snapshots/${t.accountId}/${a.id}:final` },
      });
      snapshots.push(`anvil-snapshots/${t.accountId}/${a.id}:final`);
      expect(await containerOf(a.id)).toBeNull();
      expect(existsSync(volumeOf(a.id)), delA.body).toBe(false);
      expect(
        await t.context.db.prisma.usageRecord.count({ where: { resourceId: a.id, kind: 'gpu_compute' } }),
      ).toBe(2);

      await call(t, {
        method: 'DELETE',
        url: `/v1/clusters/${c.id}`,
        payload: { confirm_deletion: 'DELETE', wait_for_completion: true, force: true },
      });
      expect(await containerOf(c.id)).toBeNull();
    });

    it('puts a cluster whose container exits in error, and deletes an expired one by itself', {
      timeout: 300_000,
    }, async () => {
      const failing = await create('exits', { command: 'exit 3' });
      const failed = await waitStatus(failing.id, 'error');
      expect(failed.status_reason).toBe('container exited with code 3');
      const row = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: failing.id } });
      expect(row.gpuIndices).toEqual([]);

      const expiring = await create('expiring', {
        expires_at: new Date(clock.now().getTime() + 3_000).toISOString(),
      });
      await waitFor(
        'expired cluster deleted',
        async () => (await call(t, { url: `/v1/clusters/${expiring.id}` })).statusCode === 404 || null,
        40_000,
      );
      expect(await containerOf(expiring.id)).toBeNull();
      const gone = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: expiring.id } });
      expect(gone.statusReason).toMatch(/expired/);

      await call(t, {
        method: 'DELETE',
        url: `/v1/clusters/${failing.id}`,
        payload: { confirm_deletion: 'DELETE', wait_for_completion: true },
      });
    });
  },
);

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../../control-plane/src/testing/accounts.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/app.ts';
import { startAgent } from '../agent/harness.ts';
import { memoizedHost, startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers } from '../fixtures/images/docker.ts';
import { uploadedDataset } from './datasets.ts';
import { TRAINER_SCRIPT } from './trainer.ts';

/**
 * Faults with a real agent and Docker: a control-plane restart in the middle of a job loses nothing, and a
 * host that dies fails its job, whose container is removed once the host's agent comes back.
 */
describe.skipIf(!dockerOrFail('test/training/faults.e2e.test.ts'))(
  'training jobs through a control-plane restart and a host death',
  () => {
    let datasetsDir: string;
    let fleet: Awaited<ReturnType<typeof startClusterFleet>>;
    let t: TestApp;
    let port: number;
    let ownerKey: string;
    const env = () => ({
      ANVIL_DATASETS_DIR: datasetsDir,
      ANVIL_HEARTBEAT_SECONDS: '1',
      ANVIL_METRICS_SECONDS: '1',
      ANVIL_HOST_GRACE_SECONDS: '3',
    });

    beforeAll(async () => {
      datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-training-faults-'));
      fleet = await startClusterFleet(env());
      t = fleet.t;
      ownerKey = t.ownerKey;
      const address = t.app.server.address();
      port = typeof address === 'object' && address ? address.port : 0;
    }, 300_000);

    afterAll(async () => {
      await fleet?.agent.stop().catch(() => {});
      await t?.close();
      if (fleet) await removeTestContainers(fleet.docker, `anvil.host=${fleet.hostId}`);
      await rm(datasetsDir, { recursive: true, force: true });
    });

    const api = (options: Parameters<typeof call>[1]) => call(t, { key: ownerKey, ...options });
    const get = async (id: string) => (await api({ url: `/v2/training/jobs/${id}` })).json();
    const containersOf = (jobId: string) =>
      fleet.docker.listContainers({ all: true, filters: { label: [`anvil.training-job=${jobId}`] } });

    it('carries a running job through a restart, then fails it when its host dies and removes its container on return', {
      timeout: 400_000,
    }, async () => {
      const datasetId = await uploadedDataset(t, '{"text":"a"}\n');
      const job = (
        await api({
          method: 'POST',
          url: '/v2/training/jobs',
          payload: {
            name: 'survivor',
            modelType: 'custom',
            datasetId,
            config: {
              image: BUSYBOX_IMAGE,
              command: ['sh', '-c', TRAINER_SCRIPT],
              training: { epochs: 100, learning_rate: 0.01 },
              parameters: { steps_per_epoch: 2, step_seconds: 0.3 },
            },
          },
        })
      ).json();
      await waitFor('running with reports', async () => {
        const j = await get(job.id);
        return j.status === 'running' && j.progress.currentStep >= 2;
      });
      const [before] = await containersOf(job.id);

      // Restart: the old process goes away (its database stays), a new one listens on the same port.
      await t.app.close();
      await t.context.stop();
      t = await createTestApp({ database: t.database, env: env() });
      await t.app.listen({ port, host: '127.0.0.1' });
      const stepAtRestart = (await get(job.id)).progress.currentStep;
      await waitFor(
        'reports read after the restart',
        async () => {
          const j = await get(job.id);
          return j.status === 'running' && j.progress.currentStep > stepAtRestart + 2;
        },
        120_000,
      );
      const [after] = await containersOf(job.id);
      expect(after?.Id).toBe(before?.Id);

      // The host dies: no heartbeat within the grace period fails the job; its GPUs are released.
      await fleet.agent.stop();
      const failed = await waitFor(
        'failed on host loss',
        async () => {
          const j = await get(job.id);
          return j.status === 'failed' ? j : null;
        },
        120_000,
      );
      expect(failed.statusReason).toContain('unreachable');
      expect(failed.resourceUsage.gpuHours).toBeGreaterThan(0);
      expect(
        await t.context.db.prisma.usageRecord.count({ where: { resourceId: job.id, kind: 'gpu_compute' } }),
      ).toBe(1);
      // The container still runs on the dead host; when its agent returns, the desired set no longer names it.
      fleet.agent = await startAgent(fleet.docker, {
        controlPlaneUrl: `http://127.0.0.1:${port}`,
        joinToken: null,
        stateDir: fleet.agent.stateDir,
        handshakeTimeoutMs: 60_000,
        host: memoizedHost(),
      });
      await waitFor(
        'container removed after the host returned',
        async () => (await containersOf(job.id)).length === 0,
        120_000,
      );
      // It can be resumed from its last checkpoint on that host.
      const resumed = await api({ method: 'POST', url: `/v2/training/jobs/${job.id}/resume`, payload: {} });
      expect(resumed.statusCode, resumed.body).toBe(200);
      expect(resumed.json().resumedFrom).toMatch(/^ckpt_/);
      await waitFor('running again', async () => (await get(job.id)).status === 'running', 120_000);
      await api({
        method: 'POST',
        url: `/v2/training/jobs/${job.id}/stop`,
        payload: { saveCheckpoint: false },
      });
      await waitFor('stopped', async () => (await get(job.id)).status === 'stopped', 120_000);
      await waitFor('containers removed', async () => (await containersOf(job.id)).length === 0, 120_000);
    });
  },
);

import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGpuProvider } from '../../agent/src/gpu/provider.ts';
import { createIptablesFirewall } from '../../agent/src/network/firewall.ts';
import { addAccount, call, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/app.ts';
import type { PlacedWorker } from '../../control-plane/src/training/launcher.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { memoizedHost, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE, ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { type Dockerd, startDockerd } from '../fleet/docker.ts';
import { execIn } from '../isolation/host-net.ts';
import { uploadedDataset } from './datasets.ts';

/**
 * Rank 0 listens at MASTER_ADDR:MASTER_PORT; rank 1 waits for /tmp/go (the test's signal, so another
 * account's attempt comes first), then connects; they swap a line each. Both check the launcher env.
 */
const RENDEZVOUS_SCRIPT = `
[ "$WORLD_SIZE" = 4 ] && [ "$NODE_RANK" = "$ANVIL_RANK" ] && [ "$LOCAL_WORLD_SIZE" = 2 ] && [ "$LOCAL_RANK" = 0 ] && [ "$RANK" = $((ANVIL_RANK * 2)) ] || { echo "bad env"; env; exit 5; }
if [ "$RANK" = 0 ]; then
  got=$(echo "ack from rank 0" | nc -l -p "$MASTER_PORT")
  echo "rank 0 got: $got"
  [ "$got" = "hello from rank 1" ]
else
  while [ ! -f /tmp/go ]; do sleep 0.2; done
  i=0
  until reply=$(echo "hello from rank 1" | nc -w 3 "$MASTER_ADDR" "$MASTER_PORT") && [ -n "$reply" ]; do
    i=$((i + 1)); [ $i -ge 50 ] && exit 2; sleep 0.2
  done
  echo "rank 1 got: $reply"
  [ "$reply" = "ack from rank 0" ]
fi
`;

/** The IPv4 address the test gave an engine's bridge: the simulated host's rendezvous address. */
function bridgeAddress(bridge: string): string {
  const address = networkInterfaces()[bridge]?.find((a) => a.family === 'IPv4')?.address;
  if (!address) throw new Error(`bridge ${bridge} has no IPv4 address`);
  return address;
}

/**
 * Issue 18 point 1 on two hosts (two private dockerd, one agent each, 3 simulated GPUs): a gang of two
 * workers of 2 GPUs cannot fit one host, so its ranks meet across hosts at rank 0's published port;
 * another account's container on rank 1's host is refused there. A worker that fails ends the gang.
 */
describe.skipIf(!dockerOrFail('multi-host training rendezvous', { extraDaemons: true }))(
  'a training gang across two hosts',
  () => {
    let datasetsDir: string;
    let t: TestApp;
    let mallory: TestMember;
    let datasetId: string;
    const engines: Dockerd[] = [];
    const agents: RunningAgent[] = [];
    const hostIds: string[] = [];
    const engineOf = (hostId: string) => engines[hostIds.indexOf(hostId)]!;

    beforeAll(async () => {
      datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-rendezvous-'));
      t = await createTestApp({
        env: { ANVIL_DATASETS_DIR: datasetsDir, ANVIL_HEARTBEAT_SECONDS: '1', ANVIL_METRICS_SECONDS: '1' },
      });
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      const address = t.app.server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      const pool = (n: number) =>
        `base=10.${150 + ((process.pid + n) % 30)}.${(process.pid % 16) * 16}.0/20,size=24`;
      engines.push(
        ...(await Promise.all([
          startDockerd('east', { addressPool: pool(0) }),
          startDockerd('west', { addressPool: pool(1) }),
        ])),
      );
      await Promise.all(engines.map((e) => ensureBusyboxImage(e.docker)));
      for (const engine of engines) {
        const token = await call(t, { method: 'POST', url: '/v2/admin/hosts/join-tokens', payload: {} });
        expect(token.statusCode, token.body).toBe(201);
        const logger = pino({ level: 'silent' });
        const stateDir = await mkdtemp(join(tmpdir(), 'anvil-rdzv-agent-'));
        agents.push(
          await startAgent(engine.docker, {
            controlPlaneUrl: `http://127.0.0.1:${port}`,
            joinToken: token.json().value,
            stateDir,
            handshakeTimeoutMs: 60_000,
            host: memoizedHost(),
            gpu: await createGpuProvider({ simulate: '3xH100', simulateSeed: stateDir, logger }),
            rendezvousAddress: bridgeAddress(engine.bridge),
          }),
        );
        hostIds.push(
          await waitFor(
            `host of ${engine.name} ready`,
            async () =>
              (
                await t.context.db.prisma.host.findFirst({
                  where: { state: 'ready', gpuCount: 3, id: { notIn: hostIds } },
                })
              )?.id ?? null,
            180_000,
          ),
        );
      }
      await t.context.clusters.prices.set({ H100: 3.6 });
      mallory = await addAccount(t, 'Mallory');
      datasetId = await uploadedDataset(t, '{"text":"a"}\n');
    }, 400_000);

    afterAll(async () => {
      await Promise.all(agents.map((a) => a.stop().catch(() => {})));
      await t?.close();
      await Promise.all(engines.map((e) => e.destroy()));
      // Rendezvous rules a stopped agent left (tagged by its host).
      const firewall = createIptablesFirewall();
      for (const hostId of hostIds)
        await firewall
          .rendezvous(createHash('sha256').update(hostId).digest('hex').slice(0, 12), [])
          .catch(() => {});
      await rm(datasetsDir, { recursive: true, force: true });
    }, 300_000);

    const job = async (name: string, command: string) => {
      const r = await call(t, {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: {
          name,
          modelType: 'custom',
          datasetId,
          maxWorkers: 2,
          config: { image: BUSYBOX_IMAGE, command: ['sh', '-c', command], gpusPerWorker: 2 },
        },
      });
      expect(r.statusCode, r.body).toBe(201);
      return r.json().id as string;
    };
    const get = async (id: string) => (await call(t, { url: `/v2/training/jobs/${id}` })).json();
    const placementOf = async (id: string) =>
      (await t.context.db.prisma.trainingJob.findUniqueOrThrow({ where: { id } }))
        .placement as unknown as PlacedWorker[];
    const containersOf = async (jobId: string) =>
      (
        await Promise.all(
          engines.map((e) =>
            e.docker.listContainers({ all: true, filters: { label: [`anvil.training-job=${jobId}`] } }),
          ),
        )
      ).flat();

    it('ranks on two hosts meet at MASTER_ADDR:MASTER_PORT; another account on the peer host is refused', {
      timeout: 400_000,
    }, async () => {
      const id = await job('gang', RENDEZVOUS_SCRIPT);
      await waitFor('gang running', async () => (await get(id)).status === 'running', 240_000);
      const placement = await placementOf(id);
      const [rank0, rank1] = [placement.find((w) => w.rank === 0)!, placement.find((w) => w.rank === 1)!];
      expect(rank0.hostId).not.toBe(rank1.hostId);
      const master = bridgeAddress(engineOf(rank0.hostId).bridge);
      const spec0 = (
        await t.context.db.prisma.workload.findUniqueOrThrow({ where: { id: rank0.workloadId } })
      ).spec as { env: Record<string, string> };
      expect(spec0.env['MASTER_ADDR']).toBe(master);
      const masterPort = Number(spec0.env['MASTER_PORT']);
      // Rank 0's port is published on its host's rendezvous address only.
      const [c0] = await engineOf(rank0.hostId).docker.listContainers({
        filters: { label: [`anvil.workload=${rank0.workloadId}`] },
      });
      expect(c0?.Ports.map((p) => [p.IP, p.PublicPort])).toEqual([[master, masterPort]]);

      // Another account's container on rank 1's host (rank 0's host cordoned while it is placed).
      await call(t, { method: 'POST', url: `/v2/admin/hosts/${rank0.hostId}/cordon`, payload: {} });
      const cluster = await call(t, {
        method: 'POST',
        url: '/v1/clusters',
        key: mallory,
        payload: {
          name: 'intruder',
          docker_image: BUSYBOX_IMAGE,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          command: 'while true; do sleep 1; done',
        },
      });
      expect(cluster.statusCode, cluster.body).toBe(201);
      const clusterId = cluster.json().data.id as string;
      await waitFor(
        'intruder running',
        async () =>
          (await call(t, { url: `/v1/clusters/${clusterId}`, key: mallory })).json().data?.status ===
          'running',
        240_000,
      );
      await call(t, { method: 'POST', url: `/v2/admin/hosts/${rank0.hostId}/uncordon` });
      const peerEngine = engineOf(rank1.hostId);
      const [intruder] = await peerEngine.docker.listContainers({
        filters: { label: [`anvil.workload=${clusterId}`] },
      });
      expect(intruder, 'the intruder shares rank 1’s host').toBeDefined();
      const attempt = await execIn(peerEngine.docker, intruder!.Id, [
        'sh',
        '-c',
        `echo intruder | nc -w 3 ${master} ${masterPort}; echo "exit $?"`,
      ]);
      expect(attempt.output).not.toContain('ack from rank 0');

      // Now rank 1 goes: the two exchange their lines and the gang completes (rank 0 would have failed
      // on any other line, so the intruder's never arrived).
      const [c1] = await peerEngine.docker.listContainers({
        filters: { label: [`anvil.workload=${rank1.workloadId}`] },
      });
      await execIn(peerEngine.docker, c1!.Id, ['touch', '/tmp/go']);
      const done = await waitFor(
        'gang completed',
        async () => {
          const j = await get(id);
          return ['completed', 'failed'].includes(j.status) ? j : null;
        },
        120_000,
      );
      expect(done.status, done.statusReason).toBe('completed');
      await call(t, {
        method: 'DELETE',
        url: `/v1/clusters/${clusterId}`,
        key: mallory,
        payload: { confirm_deletion: 'DELETE' },
      });
    });

    it('a worker that fails ends the whole gang: no worker is left running (and billed)', {
      timeout: 300_000,
    }, async () => {
      const id = await job('doomed', '[ "$ANVIL_RANK" = 1 ] && exit 3; while true; do sleep 1; done');
      const failed = await waitFor(
        'gang failed',
        async () => {
          const j = await get(id);
          return j.status === 'failed' ? j : null;
        },
        240_000,
      );
      expect(failed.statusReason).toBe('worker 1 exited with code 3');
      await waitFor('every worker removed', async () => (await containersOf(id)).length === 0, 120_000);
      expect(
        await t.context.db.prisma.usageRecord.count({ where: { resourceId: id, kind: 'gpu_compute' } }),
      ).toBeLessThanOrEqual(1);
    });
  },
);

import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { MessageOf } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FatalAgentError } from '../../agent/src/errors.ts';
import { capturedLogger } from '../../control-plane/src/testing/captured-logs.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';
import { FakeControlPlane } from './fake-control-plane.ts';
import { workloadSpec } from './fixtures.ts';
import { startAgent, tempDir } from './harness.ts';

describe.skipIf(!dockerOrFail('test/agent/agent.e2e.test.ts'))(
  'agent end to end against a fake control plane and real Docker',
  () => {
    let docker: Dockerode;
    let cp: FakeControlPlane;
    const hostIds: string[] = [];

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      cp = await FakeControlPlane.start({ heartbeatSeconds: 1, metricsSeconds: 1 });
    });

    afterAll(async () => {
      await cp.close();
      for (const hostId of hostIds) await removeTestContainers(docker, `anvil.host=${hostId}`);
    });

    it('registers, keeps its credential private, runs the desired set, streams state, logs and metrics, and resyncs after reconnects', async () => {
      const first = await startAgent(docker, { controlPlaneUrl: cp.url, joinToken: cp.createJoinToken() });
      const hostId = await cp.waitFor('registration', () => cp.hostIds()[0]);
      hostIds.push(hostId);
      await cp.waitFor('hello', () => cp.host(hostId).connected);

      // Credential saved, readable by the agent's user only.
      const credential = await stat(join(first.stateDir, 'credential.json'));
      expect(credential.mode & 0o777).toBe(0o600);
      expect((await stat(first.stateDir)).mode & 0o777).toBe(0o700);

      // The hello carried the inventory, GPUs marked simulated.
      const inventory = cp.host(hostId).inventory!;
      expect(inventory.gpus).toMatchObject({ simulated: true, source: 'simulated' });
      expect(inventory.gpus.devices).toHaveLength(2);
      expect(inventory.docker.version).not.toBeNull();
      expect(inventory.host.cpu.threads).toBeGreaterThan(0);

      const gpu = inventory.gpus.devices[1]!;
      const spec = workloadSpec(`e2e-${hostId.slice(-8)}`, {
        command: ['sh', '-c', 'echo hello from anvil; echo oops >&2; sleep 3600'],
        gpus: [{ index: gpu.index, uuid: gpu.uuid }],
        restartPolicy: { name: 'unless-stopped', maxRetries: 0 },
      });
      const reply = await cp.setDesired(hostId, [spec]);
      expect(reply).toMatchObject({ type: 'reply', ok: true, result: { generation: 1, accepted: true } });

      const running = await cp.waitFor('running workload', () =>
        cp
          .messages('actual_state', hostId)
          .flatMap((m) => m.workloads)
          .find((w) => w.workloadId === spec.workloadId && w.phase === 'running'),
      );
      const containerId = running.containerId!;
      const details = await docker.getContainer(containerId).inspect();
      expect(details.Config.Labels).toMatchObject({
        'anvil.managed': 'true',
        'anvil.host': hostId,
        'anvil.workload': spec.workloadId,
      });
      expect(details.Config.Env).toContain(`NVIDIA_VISIBLE_DEVICES=${gpu.uuid}`);
      expect(cp.messages('container_state', hostId)).toContainEqual(
        expect.objectContaining({ workloadId: spec.workloadId, phase: 'running', containerId }),
      );

      // Logs: both streams, with the workload named.
      await cp.waitFor('log lines', () => {
        const entries = cp.messages('log_batch', hostId).flatMap((b) => b.entries);
        return (
          entries.some((e) => e.stream === 'stdout' && e.line === 'hello from anvil') &&
          entries.some((e) => e.stream === 'stderr' && e.line === 'oops')
        );
      });

      // Metrics: host, both simulated GPUs (readings unknown, not invented), and the container.
      const sample = await cp.waitFor('metrics with the container', () =>
        cp
          .messages('metric_batch', hostId)
          .flatMap((b) => b.samples)
          .find((s) => s.containers.some((c) => c.containerId === containerId)),
      );
      expect(sample.host?.memoryTotalBytes).toBeGreaterThan(0);
      expect(sample.gpus.map((g) => g.uuid)).toEqual(inventory.gpus.devices.map((d) => d.uuid));
      expect(sample.gpus[0]?.utilizationPercent).toBeNull();
      expect(sample.containers.find((c) => c.containerId === containerId)?.memoryUsedBytes).toBeGreaterThan(
        0,
      );
      await cp.waitFor('heartbeats', () => cp.messages('heartbeat', hostId).length >= 1);

      // Commands get replies by id.
      expect(await cp.command(hostId, { name: 'ping' })).toMatchObject({ ok: true, result: { pong: true } });
      expect(
        await cp.command(hostId, { name: 'inspect_workload', workloadId: spec.workloadId }),
      ).toMatchObject({
        ok: true,
        result: { phase: 'running', containerId },
      });

      // The agent stops (upgrade, crash): the workload keeps running.
      await first.stop();
      expect((await docker.getContainer(containerId).inspect()).State.Running).toBe(true);
      await cp.waitFor('disconnect', () => !cp.host(hostId).connected);

      // It comes back with its saved credential (no token), gets the desired set again, adopts the container.
      const registrations = cp.messages('register').length;
      const actualBefore = cp.messages('actual_state', hostId).length;
      const second = await startAgent(docker, {
        controlPlaneUrl: cp.url,
        joinToken: null,
        stateDir: first.stateDir,
      });
      await cp.waitFor('reconnect', () => cp.host(hostId).connections === 2 && cp.host(hostId).connected);
      expect(cp.messages('register')).toHaveLength(registrations);
      const adopted = await cp.waitFor('resynced state', () =>
        cp
          .messages('actual_state', hostId)
          .slice(actualBefore)
          .flatMap((m) => m.workloads)
          .find((w) => w.workloadId === spec.workloadId && w.phase === 'running'),
      );
      expect(adopted.containerId).toBe(containerId);

      // A network drop: the agent redials on its own and resyncs; still one container.
      cp.dropConnection(hostId);
      await cp.waitFor(
        'redial after drop',
        () => cp.host(hostId).connections === 3 && cp.host(hostId).connected,
        15_000,
      );
      const list = await docker.listContainers({ all: true, filters: { label: [`anvil.host=${hostId}`] } });
      expect(list.map((c) => c.Id)).toEqual([containerId]);

      // Logs are not sent twice across the restart: the cursor survived in the state directory.
      const hellos = cp
        .messages('log_batch', hostId)
        .flatMap((b) => b.entries)
        .filter((e) => e.line === 'hello from anvil');
      expect(hellos).toHaveLength(1);

      // Emptying the desired set removes the container.
      await cp.setDesired(hostId, []);
      await cp.waitFor('removal', () =>
        cp
          .messages('container_state', hostId)
          .some((m) => m.workloadId === spec.workloadId && m.phase === 'removed'),
      );
      await expect(docker.getContainer(containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
      await second.stop();
    });

    it('stops with one clear error when the join token is refused, and keeps no credential', async () => {
      const agent = await startAgent(docker, { controlPlaneUrl: cp.url, joinToken: 'jt_not-a-real-token' });
      await expect(agent.done).rejects.toThrow(FatalAgentError);
      await expect(agent.done).rejects.toThrow(
        'join token refused by the control plane: join token is unknown, expired or used up (join_token_invalid)',
      );
      await expect(stat(join(agent.stateDir, 'credential.json'))).rejects.toMatchObject({ code: 'ENOENT' });
    });

    it('refuses a used-up join token the second time', async () => {
      const token = cp.createJoinToken(1);
      const first = await startAgent(docker, { controlPlaneUrl: cp.url, joinToken: token });
      const hostId = await cp.waitFor('registration', () =>
        cp.hostIds().find((id) => !hostIds.includes(id) && cp.host(id).connected),
      );
      hostIds.push(hostId);
      await first.stop();
      const second = await startAgent(docker, { controlPlaneUrl: cp.url, joinToken: token });
      await expect(second.done).rejects.toThrow(/join token refused by the control plane: .*used up/);
    });

    it('stops when its credential is revoked (host deleted)', async () => {
      const agent = await startAgent(docker, { controlPlaneUrl: cp.url, joinToken: cp.createJoinToken() });
      const hostId = await cp.waitFor('registration', () =>
        cp.hostIds().find((id) => !hostIds.includes(id) && cp.host(id).connected),
      );
      hostIds.push(hostId);
      cp.revoke(hostId);
      await expect(agent.done).rejects.toThrow(
        'connection refused by the control plane: host was deleted; its credential is revoked (credential_invalid)',
      );
    });

    it('refuses an agent of an incompatible protocol version, with the reason on both sides', async () => {
      const agent = await startAgent(docker, {
        controlPlaneUrl: cp.url,
        joinToken: cp.createJoinToken(),
        protocolVersion: 99,
      });
      const reason =
        'incompatible protocol version: agent speaks 99, control plane supports 1; upgrade the control plane';
      await expect(agent.done).rejects.toThrow(FatalAgentError);
      await expect(agent.done).rejects.toThrow(reason);
      expect(cp.refusalsSent).toContainEqual({ code: 'protocol_incompatible', reason });
    });

    it('refuses a control plane of an incompatible protocol version, telling it why', async () => {
      const future = await FakeControlPlane.start({ protocolVersion: 99 });
      try {
        const agent = await startAgent(docker, {
          controlPlaneUrl: future.url,
          joinToken: future.createJoinToken(),
        });
        const reason =
          'incompatible protocol version: control plane speaks 99, agent supports 1; upgrade the agent';
        await expect(agent.done).rejects.toThrow(reason);
        const refusal = await future.waitFor('refusal from the agent', () => future.refusalsReceived[0]);
        expect(refusal).toMatchObject<Partial<MessageOf<'refusal'>>>({
          code: 'protocol_incompatible',
          reason,
          retryable: false,
        });
      } finally {
        await future.close();
      }
    });

    it('keeps redialling with backoff while the control plane is down', async () => {
      const down = await FakeControlPlane.start();
      const url = down.url;
      const token = down.createJoinToken();
      await down.close();
      const logs = capturedLogger('info');
      const agent = await startAgent(docker, { controlPlaneUrl: url, joinToken: token, logger: logs.logger });
      let settled = false;
      agent.done.then(
        () => {
          settled = true;
        },
        () => {
          settled = true;
        },
      );
      // Still trying, not failed: an unreachable control plane is never fatal.
      const redials = () => logs.lines.filter((line) => line['msg'] === 'redialling the control plane');
      await waitFor('three redials', () => redials().length >= 3, 30_000, 50);
      expect(settled).toBe(false);
      await agent.stop();
    });

    it('needs a join token on first contact', async () => {
      const agent = await startAgent(docker, {
        controlPlaneUrl: cp.url,
        joinToken: null,
        stateDir: await tempDir('anvil-empty-'),
      });
      await expect(agent.done).rejects.toThrow(
        /no host credential at .*credential.json and no join token given/,
      );
    });
  },
);

import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { newId } from '@anvil/shared';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { specHash } from '../../agent/src/docker/labels.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { workloadSpec } from '../agent/fixtures.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';

/**
 * Issue 5 proof for secrets: a real control plane (HTTP over loopback) and a real agent (simulated
 * GPUs) against real Docker. Secrets created through the API reach the cluster's container as an env
 * variable and as a file with its mode; the stored row holds only ciphertext; a rotated value reaches the
 * container at its next start. The Cluster row and its workload (id = cluster id, contract 1) are
 * written through the services, as the clusters area does when it places a cluster.
 */
/** The parts of the answers this test reads. */
interface ApiData {
  secrets: { usage_statistics: { access_count: number } }[];
  rotation_policy: { last_rotation: string | null };
}

describe.skipIf(!dockerOrFail('test/secrets/secrets.e2e.test.ts'))(
  'cluster secrets reach the container (real agent, real Docker)',
  () => {
    let docker: Dockerode;
    let t: TestApp;
    let agent: RunningAgent;
    let baseUrl: string;
    let hostId: string;

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      t = await createTestApp({
        env: { ANVIL_SECRET_KEY: 'c'.repeat(64) },
      });
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      baseUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
      const { value: joinToken } = await t.context.fleet.joinTokens.create(
        { userId: null, keyId: null },
        { description: 'secrets e2e' },
      );
      agent = await startAgent(docker, { controlPlaneUrl: baseUrl, joinToken });
      hostId = await waitFor('host registration', async () => {
        const host = await t.context.db.prisma.host.findFirst({ orderBy: { createdAt: 'desc' } });
        return host?.id;
      });
    });

    afterAll(async () => {
      await agent?.stop();
      if (hostId) await removeTestContainers(docker, `anvil.host=${hostId}`);
      await t?.close();
    });

    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${t.ownerKey}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: (await res.json()) as { data: ApiData } };
    };

    async function exec(containerId: string, cmd: string[]): Promise<string> {
      const e = await docker
        .getContainer(containerId)
        .exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
      const stream = await e.start({ hijack: true, stdin: false });
      const out = new PassThrough();
      const chunks: Buffer[] = [];
      out.on('data', (c: Buffer) => chunks.push(c));
      docker.modem.demuxStream(stream, out, out);
      await new Promise((resolve) => stream.on('end', resolve));
      return Buffer.concat(chunks).toString('utf8');
    }

    const runningContainer = (clusterId: string, not?: string) =>
      waitFor('the cluster container running', async () => {
        const w = await t.context.fleet.workloads.get(clusterId);
        const id = w.actualStatus?.containerId;
        return w.phase === 'running' && id && id !== not ? id : null;
      });

    it('injects env and file secrets, stores ciphertext only, counts injections, and rotates at next start', async () => {
      const clusterId = newId('cluster');
      await t.context.db.prisma.cluster.create({
        data: {
          id: clusterId,
          accountId: t.accountId,
          ownerId: t.userId,
          name: 'secrets-e2e',
          status: 'running',
          gpuType: 'H100',
          gpuCount: 0,
          cpuCores: 1,
          memoryGb: 1,
          storageGb: 1,
          dockerImage: 'anvil-test/busybox:latest',
          command: [],
          gpuIndices: [],
          hostId,
        },
      });
      const token = 'hf_e2e_token_value_42';
      const password = 'pg-password-e2e!';
      const created = await api('POST', `/v1/clusters/${clusterId}/secrets`, {
        name: 'hf-token',
        type: 'api_key',
        category: 'ml_services',
        value: token,
        environment_variable: 'HF_TOKEN',
      });
      expect(created.status).toBe(201);
      expect(created.body.data).not.toHaveProperty('value');
      const file = await api('POST', `/v1/clusters/${clusterId}/secrets`, {
        name: 'db-password',
        type: 'database',
        value: password,
        file_path: '/run/secrets/anvil/db_password',
        permissions: { file_mode: '0440' },
      });
      expect(file.status).toBe(201);

      const raw = await t.context.db.sql.query<{ name: string; sealed_value: string }>(
        'SELECT name, sealed_value FROM cluster_secrets WHERE cluster_id = $1',
        [clusterId],
      );
      for (const row of raw) {
        expect(row.sealed_value).not.toContain(row.name === 'hf-token' ? token : password);
        expect(row.sealed_value).toMatch(/^v1\./);
      }

      const spec = workloadSpec(clusterId, {
        labels: {},
        command: ['sh', '-c', 'echo "token=$HF_TOKEN"; cat /run/secrets/anvil/db_password; echo; sleep 3600'],
        restartPolicy: { name: 'unless-stopped', maxRetries: 0 },
      });
      const { workloadId: _id, ...specInput } = spec;
      await t.context.fleet.workloads.create({
        id: clusterId,
        hostId,
        kind: 'cluster',
        ownerAccountId: t.accountId,
        spec: specInput,
      });
      const containerId = await runningContainer(clusterId);

      // Inside the container: the variable, the file with its content and mode.
      expect(await exec(containerId, ['sh', '-c', 'printf %s "$HF_TOKEN"'])).toBe(token);
      expect(await exec(containerId, ['cat', '/run/secrets/anvil/db_password'])).toBe(password);
      expect(await exec(containerId, ['stat', '-c', '%a', '/run/secrets/anvil/db_password'])).toBe('440\n');
      // The container's own output saw them at start.
      const logs = (await docker.getContainer(containerId).logs({ stdout: true, stderr: true })).toString(
        'utf8',
      );
      expect(logs).toContain(`token=${token}`);
      expect(logs).toContain(password);

      // Never stored with the workload, and out of the spec hash label.
      const stored = await t.context.db.prisma.workload.findUniqueOrThrow({ where: { id: clusterId } });
      expect(JSON.stringify(stored.spec)).not.toContain(token);
      expect(JSON.stringify(stored.spec)).not.toContain('secretEnv');
      const details = await docker.getContainer(containerId).inspect();
      const context = { volumeRoot: `${agent.stateDir}/volumes`, gpuMode: 'env-only' as const };
      expect(details.Config.Labels['anvil.spec-hash']).toBe(specHash(spec, context));

      // The start counted as one access of each injected secret.
      await waitFor('injection counted', async () => {
        const res = await api('GET', `/v1/clusters/${clusterId}/secrets`);
        return res.body.data.secrets.every((s) => s.usage_statistics.access_count >= 1);
      });

      // A rotated value reaches the container at its next start (stop removes it, start creates it anew).
      const rotated = await api('PUT', `/v1/clusters/${clusterId}/secrets/db-password`, {
        value: 'rotated-pw',
      });
      expect(rotated.status).toBe(200);
      expect(rotated.body.data.rotation_policy.last_rotation).not.toBeNull();
      await api('PUT', `/v1/clusters/${clusterId}/secrets/hf-token`, { value: 'hf_rotated' });
      expect(await exec(containerId, ['cat', '/run/secrets/anvil/db_password'])).toBe(password);
      await t.context.fleet.workloads.setDesired(clusterId, 'stopped');
      await waitFor('container removed', async () => {
        const list = await docker.listContainers({ all: true, filters: { id: [containerId] } });
        return list.length === 0;
      });
      await t.context.fleet.workloads.setDesired(clusterId, 'running');
      const next = await runningContainer(clusterId, containerId);
      expect(await exec(next, ['cat', '/run/secrets/anvil/db_password'])).toBe('rotated-pw');
      expect(await exec(next, ['sh', '-c', 'printf %s "$HF_TOKEN"'])).toBe('hf_rotated');
    }, 300_000);
  },
);

import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { BUSYBOX_IMAGE, ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';

/**
 * Issue 4 points 5 and 6 end to end: a real control plane (HTTP over loopback), a real agent (simulated
 * GPUs 2xH100) and real Docker. A cluster created through POST /v1/clusters runs a busybox container
 * that prints lines on stdout and stderr; its logs (list, search, SSE stream, gzip download) and its
 * metrics (snapshot, history, statistics) are read back through the cluster telemetry routes.
 */
describe.skipIf(!dockerOrFail('test/cluster-telemetry/cluster-telemetry.e2e.test.ts'))(
  'cluster metrics and logs through the API (real agent, real Docker)',
  () => {
    let docker: Dockerode;
    let t: TestApp;
    let agent: RunningAgent;
    let baseUrl: string;
    let hostId: string;
    let clusterId: string;

    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${t.ownerKey}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      // biome-ignore lint/suspicious/noExplicitAny: the test reads many response shapes
      return { status: res.status, body: (await res.json()) as any };
    };

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      t = await createTestApp({ env: { ANVIL_METRICS_SECONDS: '1' } });
      t.context.clusterTelemetry.streamOptions.pollMs = 100;
      await t.context.clusters.prices.set({ H100: 2.5 });
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      baseUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
      const { value: joinToken } = await t.context.fleet.joinTokens.create(
        { userId: null, keyId: null },
        { description: 'cluster telemetry e2e' },
      );
      agent = await startAgent(docker, { controlPlaneUrl: baseUrl, joinToken });
      hostId = await waitFor('host with its GPU inventory', async () => {
        const host = await t.context.db.prisma.host.findFirst({ orderBy: { createdAt: 'desc' } });
        return host?.inventory ? host.id : null;
      });
    }, 240_000);

    afterAll(async () => {
      await agent?.stop();
      if (hostId) await removeTestContainers(docker, `anvil.host=${hostId}`);
      await t?.close();
    });

    it('shows the container output and its metrics through the cluster routes', async () => {
      const created = await api('POST', '/v1/clusters', {
        name: 'telemetry-e2e',
        docker_image: BUSYBOX_IMAGE,
        gpu_type: 'H100',
        gpu_count: 1,
        cpu_cores: 1,
        memory_gb: 1,
        storage_gb: 1,
        command:
          'i=0; while true; do echo "tick $i"; echo "ERROR: failure $i" >&2; i=$((i+1)); sleep 0.3; done',
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      clusterId = created.body.data.id;
      let last: unknown = null;
      await waitFor('cluster running', async () => {
        const res = await api('GET', `/v1/clusters/${clusterId}`);
        last = res.body;
        return res.body.data?.status === 'running';
      }).catch((error) => {
        throw new Error(`${error.message}: ${JSON.stringify(last)}`);
      });

      // Logs: the container's lines, stdout at info, stderr at error (the documented rule).
      const logs = await waitFor('ten lines of logs', async () => {
        const res = await api('GET', `/v1/clusters/${clusterId}/logs?tail=false&limit=1000`);
        return res.body.data.logs.length >= 10 ? res.body : null;
      }).catch(async (error) => {
        const workload = await t.context.db.prisma.workload.findUnique({ where: { id: clusterId } });
        const count = await t.context.db.sql.query(
          'SELECT workload_id, count(*) FROM log_entries GROUP BY 1',
        );
        throw new Error(`${error.message}: ${JSON.stringify({ workload, count })}`);
      });
      expect(logs.success).toBe(true);
      const first = logs.data.logs.find((l: { message: string }) => l.message === 'tick 0');
      expect(first).toMatchObject({
        level: 'info',
        source: 'container',
        log_type: 'application',
        tags: ['stdout'],
      });
      expect(first.metadata.host).toBe(hostId);
      const errors = await api('GET', `/v1/clusters/${clusterId}/logs?level=error&limit=5`);
      expect(errors.body.data.logs.length).toBeGreaterThan(0);
      for (const entry of errors.body.data.logs) expect(entry.message).toMatch(/^ERROR: failure \d+$/);
      expect(errors.body.meta.log_retention_days).toBe(7);

      const search = await api('POST', `/v1/clusters/${clusterId}/logs/search`, {
        query: '(tick OR failure) AND NOT stream:stderr AND "tick 1"',
        sort: 'timestamp:asc',
      });
      expect(search.status, JSON.stringify(search.body)).toBe(200);
      expect(search.body.data.logs[0].message).toMatch(/^tick 1\d*$/);
      expect(search.body.data.total_matches).toBeGreaterThan(0);

      // SSE: resume after the first line; new lines keep arriving while following.
      const abort = new AbortController();
      const stream = await fetch(`${baseUrl}/v1/clusters/${clusterId}/logs/stream`, {
        headers: { authorization: `Bearer ${t.ownerKey}`, 'last-event-id': first.id },
        signal: abort.signal,
      });
      expect(stream.status).toBe(200);
      const reader = stream.body!.getReader();
      let raw = '';
      const newestAtStart = Number(logs.data.logs.at(-1).id);
      let ids: number[] = [];
      while (!ids.some((id) => id > newestAtStart + 2)) {
        const { value, done } = await reader.read();
        if (done) break;
        raw += new TextDecoder().decode(value);
        ids = [...raw.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
      }
      abort.abort();
      expect(ids[0]).toBe(Number(first.id) + 1);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));

      const download = await fetch(`${baseUrl}/v1/clusters/${clusterId}/logs/download?format=text`, {
        headers: { authorization: `Bearer ${t.ownerKey}` },
      });
      expect(download.headers.get('content-disposition')).toContain(`${clusterId}-logs-`);
      const text = gunzipSync(Buffer.from(await download.arrayBuffer())).toString('utf8');
      expect(text).toMatch(/ INFO {2}\[stdout\] tick 0\n/);
      expect(text).toMatch(/ ERROR \[stderr\] ERROR: failure 0\n/);

      // Metrics: the agent samples every second; the snapshot shows the container and the cluster's GPU.
      const snapshot = await waitFor('a metrics snapshot with container values', async () => {
        const res = await api('GET', `/v1/clusters/${clusterId}/metrics?include_processes=true`);
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        return res.body.data.cpu.memory_used !== null && res.body.data.gpu.utilization.gpu_0 !== undefined
          ? res.body
          : null;
      });
      expect(Object.keys(snapshot.data.gpu.utilization)).toEqual(['gpu_0']);
      expect(snapshot.data.cpu.memory_used).toBeGreaterThan(0);
      expect(snapshot.data.cpu.cores).toBe(1);
      expect(snapshot.data.network.bytes_received).toEqual(expect.any(Number));
      expect(snapshot.meta.metrics_version).toBe('1');

      await api('POST', `/v1/clusters/${clusterId}/metrics/custom`, { name: 'steps', value: 3 });
      const start = new Date(Date.now() - 10 * 60_000).toISOString();
      const end = new Date(Date.now() + 60_000).toISOString();
      const history = await api(
        'GET',
        `/v1/clusters/${clusterId}/metrics/historical?start_time=${start}&end_time=${end}&interval=1m&metrics=cpu,custom.steps`,
      );
      expect(history.status, JSON.stringify(history.body)).toBe(200);
      const names = new Set(history.body.data.data_points.map((p: { metric: string }) => p.metric));
      expect(names).toContain('cpu.memory_used');
      expect(names).toContain('custom.steps');
      const stats = await api(
        'GET',
        `/v1/clusters/${clusterId}/metrics/aggregated?window=15m&metrics=cpu.memory_used`,
      );
      expect(stats.body.data.metrics[0]).toMatchObject({
        metric: 'cpu.memory_used',
        count: expect.any(Number),
      });
      expect(stats.body.data.metrics[0].count).toBeGreaterThan(0);

      // The cluster object's metrics (contract 3) from the same samples.
      const { metricsViewPart } = await import('../../control-plane/src/cluster-telemetry/index.ts');
      const cluster = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id: clusterId } });
      const part = await metricsViewPart(t.context.clusterTelemetry.metrics)(cluster);
      expect(part?.memory_utilization).toEqual(expect.any(Number));
    }, 300_000);
  },
);

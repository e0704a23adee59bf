import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createTestApp, ShiftedClock, type TestApp } from '../../control-plane/src/testing/index.ts';
import { workloadSpecInput } from '../../control-plane/src/testing/workload-spec.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';

// biome-ignore lint/suspicious/noExplicitAny: the API's JSON answers are read field by field, loosely, in these tests.
type AnswerBody = Record<string, any>;

const run = promisify(execFile);
const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

async function until<T>(
  what: string,
  check: () => Promise<T | null | undefined | false>,
  timeoutMs = 180_000,
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch((error: Error) => {
      if (error.name !== 'Error' || /refus|fatal/i.test(error.message)) throw error;
      return null;
    });
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
}

/**
 * The proxy over the REAL reverse tunnels (context.fleet.tunnels, contract 4): a control plane listening
 * on loopback, an in-process agent against real Docker (simulated GPUs), and the cluster's container run
 * as the workload whose id is the cluster id (contract 1). The cluster row is inserted directly, as the
 * clusters service leaves a running cluster.
 */
describe.skipIf(!dockerOrFail('test/proxy/proxy-agent.e2e.test.ts'))(
  'HTTPS port proxy through the real agent tunnels',
  () => {
    let docker: Dockerode;
    let t: TestApp;
    /** The control plane's time: the rate-limit test skips ahead on it to the start of a counting window. */
    const clock = new ShiftedClock();
    let agent: RunningAgent;
    let dataDir: string;
    let caPath: string;
    let proxyPort: number;
    let clusterId: string;

    const host = (port: number) => `${clusterId.replace('_', '-')}-${port}.proxy.localhost`;
    async function curlStatus(port: number, args: string[] = []) {
      const { stdout } = await run('curl', [
        '-s',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '--max-time',
        '20',
        '--cacert',
        caPath,
        '--resolve',
        `${host(port)}:${proxyPort}:127.0.0.1`,
        ...args,
        `https://${host(port)}:${proxyPort}/index.html`,
      ]);
      return Number(stdout);
    }
    const bearer = () => ['-H', `Authorization: Bearer ${t.ownerKey}`];
    const api = async (method: 'GET' | 'PUT' | 'POST', url: string, payload?: object) => {
      const r = await t.app.inject({ method, url, headers: t.auth(), ...(payload ? { payload } : {}) });
      return r.json() as AnswerBody;
    };

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      dataDir = await mkdtemp(join(tmpdir(), 'anvil-proxy-agent-'));
      t = await createTestApp({
        clock,
        env: {
          ANVIL_PROXY_PORT: '0',
          ANVIL_DATA_DIR: dataDir,
          ANVIL_HEARTBEAT_SECONDS: '2',
          ANVIL_HOST_GRACE_SECONDS: '60',
        },
      });
      const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
      await t.context.proxy.start();
      proxyPort = t.context.proxy.port!;
      caPath = join(dataDir, 'proxy-tls', 'ca.crt');
      const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
      // Generous handshake: test machines here are heavily loaded.
      agent = await startAgent(docker, {
        controlPlaneUrl: url,
        joinToken: value,
        handshakeTimeoutMs: 60_000,
      });
      // A fatal refusal ends the agent's run: fail at once with its reason rather than waiting.
      const fatal = agent.done.then(
        () => null,
        (error: Error) => error,
      );
      const hostId = await until('registration', async () => {
        const refused = await Promise.race([fatal, Promise.resolve(null)]);
        if (refused) throw refused;
        return agent.agent.hostId;
      });
      await until('agent connected', async () => t.context.fleet.agents.isConnectedHere(hostId));

      clusterId = `cluster_${Date.now().toString(36)}agent`;
      await t.context.db.prisma.cluster.create({
        data: {
          id: clusterId,
          accountId: t.accountId,
          ownerId: t.userId,
          name: 'proxy-agent-e2e',
          status: 'running',
          gpuType: 'H100',
          gpuCount: 0,
          cpuCores: 1,
          memoryGb: 1,
          storageGb: 1,
          dockerImage: 'anvil-test/busybox:latest',
          command: [],
          hostId,
          ports: [
            { internal_port: 8080, protocol: 'tcp', description: 'httpd' },
            { internal_port: 9000, protocol: 'tcp', description: 'ws echo' },
          ],
          gpuIndices: [],
        },
      });
      // The fixture scripts travel inside the command (the agent mounts nothing from the test).
      const b64 = async (file: string) => (await readFile(join(FIXTURES, file))).toString('base64');
      const script = [
        'mkdir -p /srv/www',
        `echo ${await b64('ws.sh')} | base64 -d > /srv/ws.sh`,
        `echo ${await b64('www/index.html')} | base64 -d > /srv/www/index.html`,
        'chmod +x /srv/ws.sh',
        'nc -ll -p 9000 -e /srv/ws.sh &',
        'httpd -p 8080 -h /srv/www',
        'exec sleep 86400',
      ].join('\n');
      await t.context.fleet.workloads.create({
        id: clusterId,
        hostId,
        kind: 'cluster',
        ownerAccountId: t.accountId,
        spec: workloadSpecInput({
          image: 'anvil-test/busybox:latest',
          command: ['sh', '-c', script],
          labels: { 'anvil.proxy-test': '1' },
        }),
      });
      await until(
        'workload running',
        async () => {
          const view = await t.context.fleet.workloads.get(clusterId);
          return view.phase === 'running' && view.actualStatus?.ipAddress;
        },
        120_000,
      );
    }, 540_000);

    afterAll(async () => {
      await t?.context.proxy.stop(1_000);
      await agent?.stop().catch(() => {});
      await t?.close();
      await removeTestContainers(docker, `anvil.workload=${clusterId}`);
      await rm(dataDir, { recursive: true, force: true });
    }, 120_000);

    it('forwards HTTP (200 with a key, 401 without), refuses a blocked address (403) and answers 429 over the limit', async () => {
      await until('httpd through the tunnel', async () => (await curlStatus(8080, bearer())) === 200);
      expect(await curlStatus(8080)).toBe(401);

      await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, { blocked_ips: ['127.0.0.2'] });
      expect(await curlStatus(8080, [...bearer(), '--interface', '127.0.0.2'])).toBe(403);
      expect(await curlStatus(8080, bearer())).toBe(200);

      await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, {
        blocked_ips: [],
        rate_limiting: { per_user_limit: { requests_per_minute: 2, burst_size: 2 } },
      });
      // 2 per 60-s window aligned to the clock (burst_size / requests_per_minute): start well inside one.
      const left = 60_000 - (clock.now().getTime() % 60_000);
      if (left < 10_000) clock.advance(left + 100);
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push(await curlStatus(8080, bearer()));
      expect(statuses).toEqual([200, 200, 429]);
      await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, { rate_limiting: { per_user_limit: null } });
    }, 240_000);

    it('carries a WebSocket echo through the tunnel', async () => {
      const echoed = await new Promise<string>((resolve, reject) => {
        // Dial loopback, present the mapping's name (SNI, certificate check) and Host header.
        const tlsTo = { ca: readFileSync(caPath), servername: host(9000), handshakeTimeout: 30_000 };
        const ws = new WebSocket(`wss://127.0.0.1:${proxyPort}/`, {
          ...tlsTo,
          headers: { Host: `${host(9000)}:${proxyPort}`, Authorization: `Bearer ${t.ownerKey}` },
        });
        ws.on('open', () => ws.send('over the agent tunnel'));
        ws.on('message', (data) => {
          resolve(data.toString());
          ws.close();
        });
        ws.on('unexpected-response', (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
        ws.on('close', (code) => reject(new Error(`closed ${code} before an echo`)));
        ws.on('error', reject);
      });
      expect(echoed).toBe('over the agent tunnel');
    }, 120_000);

    it('health goes unhealthy when httpd stops inside the container and healthy when it is back', async () => {
      const ports = (await api('GET', `/v1/clusters/${clusterId}/proxy`))['data']
        .port_mappings as AnswerBody[];
      const portId = ports.find((p) => p['internal_port'] === 8080)!['id'];
      await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${portId}`, {
        health_check: { path: '/index.html', interval_seconds: 1, timeout_seconds: 1, retries: 2 },
      });
      const status = async () =>
        ((await api('GET', `/v1/clusters/${clusterId}/proxy`))['data'].port_mappings as AnswerBody[]).find(
          (p) => p['id'] === portId,
        )!['health_status'];
      await until('healthy', async () => (await status()) === 'healthy');
      const exec = async (command: string[]) => {
        const session = await t.context.fleet.tunnels.openExec(clusterId, { command, tty: false });
        session.stdin.end();
        await session.exit;
      };
      await exec(['killall', 'httpd']);
      await until('unhealthy', async () => (await status()) === 'unhealthy');
      await exec(['httpd', '-p', '8080', '-h', '/srv/www']);
      await until('healthy again', async () => (await status()) === 'healthy');
    }, 180_000);
  },
);

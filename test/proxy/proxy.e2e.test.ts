import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { newId } from '@anvil/shared';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import {
  createTestApp,
  waitFor as pollUntil,
  ShiftedClock,
  type TestApp,
} from '../../control-plane/src/testing/index.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';
import { DockerBridgeTunnels } from './docker-bridge-tunnels.ts';

// biome-ignore lint/suspicious/noExplicitAny: the API's JSON answers are read field by field, loosely, in these tests.
type AnswerBody = Record<string, any>;

const run = promisify(execFile);
const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

interface CurlResult {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Polls `check` until it holds (30 s). */
const waitFor = <T>(what: string, check: () => Promise<T>) => pollUntil(what, check, 30_000);

describe.skipIf(!dockerOrFail('test/proxy/proxy.e2e.test.ts'))(
  'HTTPS port proxy against a real container',
  () => {
    let docker: Dockerode;
    let t: TestApp;
    /** The control plane's time: the rate-limit test skips ahead on it to the start of a counting window. */
    const clock = new ShiftedClock();
    let dataDir: string;
    let caPath: string;
    let proxyPort: number;
    const clusterId = newId('cluster');
    const label = clusterId.replace('_', '-');
    let httpPortId: string;

    const host = (port: number) => `${label}-${port}.proxy.localhost`;

    async function curl(port: number, path: string, args: string[] = []): Promise<CurlResult> {
      const { stdout } = await run(
        'curl',
        [
          '-sS',
          '-i',
          '--max-time',
          '20',
          '--cacert',
          caPath,
          '--resolve',
          `${host(port)}:${proxyPort}:127.0.0.1`,
          ...args,
          `https://${host(port)}:${proxyPort}${path}`,
        ],
        { maxBuffer: 64 * 1024 * 1024, encoding: 'latin1' },
      );
      // With -i, a 100 Continue (large uploads) precedes the final head.
      const blocks = stdout.split('\r\n\r\n');
      let index = 0;
      while (/^HTTP\/[\d.]+ 100/.test(blocks[index] ?? '')) index++;
      const head = blocks[index] ?? '';
      const body = blocks.slice(index + 1).join('\r\n\r\n');
      const [statusLine, ...lines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const at = line.indexOf(':');
        headers[line.slice(0, at).toLowerCase()] = line.slice(at + 1).trim();
      }
      return { status: Number(statusLine?.split(' ')[1]), headers, body };
    }

    const bearer = () => ['-H', `Authorization: Bearer ${t.ownerKey}`];

    async function api(method: string, url: string, payload?: unknown) {
      const response = await t.app.inject({
        method: method as 'GET',
        url,
        headers: t.auth(),
        ...(payload === undefined ? {} : { payload: payload as object }),
      });
      return { status: response.statusCode, body: response.json() as AnswerBody };
    }

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      dataDir = await mkdtemp(join(tmpdir(), 'anvil-proxy-'));
      t = await createTestApp({
        env: { ANVIL_PROXY_PORT: '0', ANVIL_DATA_DIR: dataDir, ANVIL_HOST: '0.0.0.0' },
        clock,
        // Contract 4's real TunnelOpener needs an agent running the workload; this file uses the named test
        // double (net.connect to the container on the Docker bridge). See the report for the agent-backed run.
        seams: { proxyTunnels: new DockerBridgeTunnels(docker) },
      });
      await t.context.proxy.start();
      proxyPort = t.context.proxy.port!;
      caPath = join(dataDir, 'proxy-tls', 'ca.crt');

      // The cluster row as the clusters service would leave it running; the container carries its id as
      // the workload label (contract 1), which is how the test double finds it.
      await t.context.db.prisma.cluster.create({
        data: {
          id: clusterId,
          accountId: t.accountId,
          ownerId: t.userId,
          name: 'proxy-e2e',
          status: 'running',
          gpuType: 'H100',
          gpuCount: 1,
          cpuCores: 2,
          memoryGb: 4,
          storageGb: 10,
          dockerImage: 'anvil-test/busybox:latest',
          command: [],
          ports: [{ internal_port: 8080, protocol: 'tcp', description: 'busybox httpd' }],
          gpuIndices: [],
        },
      });
      const container = await docker.createContainer({
        Image: 'anvil-test/busybox:latest',
        // Not `anvil.test=1`: other test files sweep every container with that label while this one runs.
        Labels: { 'anvil.proxy-test': '1', 'anvil.workload': clusterId },
        Cmd: [
          'sh',
          '-c',
          'nc -ll -p 9000 -e /srv/ws.sh & nc -ll -p 9100 -e /srv/headers.sh & httpd -p 8080 -h /srv/www; exec sleep 86400',
        ],
        HostConfig: { Binds: [`${FIXTURES}:/srv:ro`], AutoRemove: false },
      });
      await container.start();
    }, 300_000);

    afterAll(async () => {
      await t?.context.proxy.stop(1_000);
      await t?.close();
      await removeTestContainers(docker, `anvil.workload=${clusterId}`);
      await rm(dataDir, { recursive: true, force: true });
    }, 120_000);

    it('serves the development CA certificate, seeds mappings from the cluster ports, and reports the certificate served', async () => {
      const info = await api('GET', `/v1/clusters/${clusterId}/proxy?include_ssl_info=true`);
      expect(info.status).toBe(200);
      expect(info.body['data'].ssl_certificate).toMatchObject({
        issuer: 'Anvil Development CA',
        status: 'valid',
      });
      expect(info.body['data'].port_mappings).toHaveLength(1);
      const [mapping] = info.body['data'].port_mappings;
      expect(mapping).toMatchObject({ internal_port: 8080, external_port: 30000, status: 'active' });
      httpPortId = mapping.id;
      expect(info.body['data'].proxy_url).toBe(`https://${host(8080)}:${proxyPort}`);
      const ca = await t.app.inject({ method: 'GET', url: '/proxy/ca.pem' });
      expect(ca.body).toBe(await readFile(caPath, 'utf8'));
      // The served certificate (what curl verified against the CA) is the one reported.
      const { stdout } = await run('sh', [
        '-c',
        `echo | openssl s_client -connect 127.0.0.1:${proxyPort} -servername ${host(8080)} 2>/dev/null | openssl x509 -noout -enddate`,
      ]);
      const until = new Date(stdout.trim().replace('notAfter=', '')).toISOString();
      expect(info.body['data'].ssl_certificate.valid_until).toBe(until);
    });

    it('forwards with a key, refuses without one (401), never forwards the key, and streams large bodies both ways', async () => {
      const denied = await curl(8080, '/');
      expect(denied.status).toBe(401);
      expect(denied.headers['www-authenticate']).toContain('Bearer');

      const ok = await curl(8080, '/', bearer());
      expect(ok.status).toBe(200);
      expect(ok.body).toContain('anvil proxy test');
      expect(ok.headers['strict-transport-security']).toBe('max-age=31536000');

      // What the container receives: no Anvil key, no proxy cookie, the forwarding headers.
      await api('POST', `/v1/clusters/${clusterId}/proxy/ports`, {
        internal_port: 9100,
        description: 'headers',
      });
      const seen = await curl(9100, '/echo?q=1', [
        ...bearer(),
        '-H',
        'Cookie: a=1; anvil_proxy_session=zzz; b=2',
      ]);
      expect(seen.status).toBe(200);
      expect(seen.body).toContain('GET /echo?q=1 HTTP/1.1');
      expect(seen.body).not.toMatch(/authorization/i);
      expect(seen.body).not.toContain('anvil_proxy_session');
      expect(seen.body).toContain('cookie: a=1; b=2');
      expect(seen.body).toContain('x-forwarded-proto: https');

      // 8 MB up (CGI hashes stdin) and 8 MB down (a file), compared by sha256.
      const blob = randomBytes(8 * 1024 * 1024);
      const upload = join(dataDir, 'up.bin');
      await writeFile(upload, blob);
      const up = await curl(8080, '/cgi-bin/sum', [
        ...bearer(),
        '--data-binary',
        `@${upload}`,
        '-H',
        'Content-Type: application/octet-stream',
      ]);
      expect(up.status).toBe(200);
      expect(up.body.trim()).toBe(createHash('sha256').update(blob).digest('hex'));
    });

    it('carries WebSocket upgrades both ways and refuses an unauthenticated upgrade', async () => {
      await api('POST', `/v1/clusters/${clusterId}/proxy/ports`, {
        internal_port: 9000,
        description: 'ws echo',
      });
      const ca = await readFile(caPath);
      // Dial loopback, present the mapping's name (SNI, certificate check) and Host header.
      const url = `wss://127.0.0.1:${proxyPort}/socket`;
      const tlsTo = { ca, servername: host(9000), handshakeTimeout: 30_000 };
      const hostHeader = `${host(9000)}:${proxyPort}`;

      const echoed = await new Promise<string>((resolve, reject) => {
        const ws = new WebSocket(url, {
          ...tlsTo,
          headers: { Host: hostHeader, Authorization: `Bearer ${t.ownerKey}` },
        });
        ws.on('open', () => ws.send('hello through the tunnel'));
        ws.on('message', (data) => {
          resolve(data.toString());
          ws.close();
        });
        ws.on('unexpected-response', (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
        ws.on('close', (code) => reject(new Error(`closed ${code} before an echo`)));
        ws.on('error', reject);
      });
      expect(echoed).toBe('hello through the tunnel');

      const refused = await new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(url, { ...tlsTo, headers: { Host: hostHeader } });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => reject(new Error('opened without a key')));
        ws.on('error', () => {});
      });
      expect(refused).toBe(401);
    }, 120_000);

    it('logs in through a one-time link into a cookie session', async () => {
      const link = await api('POST', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}/login-link`, {
        next: '/index.html',
      });
      expect(link.status).toBe(201);
      const jar = join(dataDir, 'cookies.txt');
      const path = new URL(link.body['data'].url).pathname + new URL(link.body['data'].url).search;
      const login = await curl(8080, path, ['-c', jar]);
      expect(login.status).toBe(302);
      expect(login.headers['location']).toBe('/index.html');
      expect(login.headers['set-cookie']).toMatch(/anvil_proxy_session=.*HttpOnly/);
      expect((await curl(8080, '/', ['-b', jar])).status).toBe(200);
      // One time only.
      expect((await curl(8080, path)).status).toBe(401);
    });

    it('refuses a blocked address (403) by CIDR while others pass, and honours public_access', async () => {
      const blocked = await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, {
        blocked_ips: ['127.0.0.2/32', '2001:db8::/32'],
      });
      expect(blocked.status).toBe(200);
      expect(blocked.body['data'].access_control.blocked_ips).toEqual(['127.0.0.2/32', '2001:db8::/32']);
      const fromBlocked = await run('curl', [
        '-s',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '--interface',
        '127.0.0.2',
        '--cacert',
        caPath,
        '--resolve',
        `${host(8080)}:${proxyPort}:127.0.0.1`,
        '-H',
        `Authorization: Bearer ${t.ownerKey}`,
        `https://${host(8080)}:${proxyPort}/`,
      ]);
      expect(fromBlocked.stdout).toBe('403');
      expect((await curl(8080, '/', bearer())).status).toBe(200);
      await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, { blocked_ips: [] });

      const bad = await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, {
        ip_whitelist: ['10.0.0.0/33'],
      });
      expect(bad.status).toBe(400);

      const pub = await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`, {
        access_control: { public_access: true },
      });
      expect(pub.status).toBe(200);
      expect((await curl(8080, '/')).status).toBe(200);
      await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`, {
        access_control: { public_access: false },
      });
    });

    it('answers 429 with Retry-After over a rate limit, and CORS preflights', async () => {
      await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`, {
        access_control: {
          rate_limit: { requests_per_minute: 6, burst_size: 2 },
          cors: { enabled: true, allowed_origins: ['https://app.example'] },
        },
      });
      // 6 per minute with a burst of 2: 2 per 20-s window aligned to the clock; start well inside one.
      const left = 20_000 - (clock.now().getTime() % 20_000);
      if (left < 8_000) clock.advance(left + 100);
      const statuses: number[] = [];
      let retryAfter = '';
      for (let i = 0; i < 3; i++) {
        const r = await curl(8080, '/', bearer());
        statuses.push(r.status);
        if (r.status === 429) retryAfter = r.headers['retry-after'] ?? '';
      }
      expect(statuses).toEqual([200, 200, 429]);
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(retryAfter)).toBeLessThanOrEqual(20);

      const preflight = await curl(8080, '/', [
        '-X',
        'OPTIONS',
        '-H',
        'Origin: https://app.example',
        '-H',
        'Access-Control-Request-Method: PUT',
      ]);
      expect(preflight.status).toBe(204);
      expect(preflight.headers['access-control-allow-origin']).toBe('https://app.example');
      const evil = await curl(8080, '/', [
        '-X',
        'OPTIONS',
        '-H',
        'Origin: https://evil.example',
        '-H',
        'Access-Control-Request-Method: PUT',
      ]);
      expect(evil.status).toBe(403);
      await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`, {
        access_control: { rate_limit: null },
      });
    });

    it('flips health to unhealthy when the server inside stops and back when it returns', async () => {
      const set = await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`, {
        health_check: {
          path: '/index.html',
          interval_seconds: 1,
          timeout_seconds: 1,
          retries: 2,
          expected_status: 200,
        },
      });
      expect(set.status).toBe(200);
      const mappingOf = async () => {
        const r = await api('GET', `/v1/clusters/${clusterId}/proxy?include_health=true`);
        return (r.body['data'].port_mappings as AnswerBody[]).find((m) => m['id'] === httpPortId)!;
      };
      await waitFor('healthy', async () => (await mappingOf())['health_status'] === 'healthy');
      const [container] = await docker.listContainers({
        filters: { label: [`anvil.workload=${clusterId}`] },
      });
      const exec = async (cmd: string[]) => {
        const e = await docker.getContainer(container!.Id).exec({ Cmd: cmd });
        await e.start({ Detach: true });
      };
      await exec(['killall', 'httpd']);
      const down = await waitFor('unhealthy', async () => {
        const m = await mappingOf();
        return m['health_status'] === 'unhealthy' ? m : null;
      });
      expect(down['health_check'].consecutive_failures).toBeGreaterThanOrEqual(2);
      expect(down['health_check'].last_check).not.toBeNull();
      expect((await curl(8080, '/', bearer())).status).toBe(502);
      await exec(['httpd', '-p', '8080', '-h', '/srv/www']);
      await waitFor('healthy again', async () => (await mappingOf())['health_status'] === 'healthy');
    });

    it('reports usage statistics and access logs from the traffic, port conflicts, deletion and the disabled proxy', async () => {
      const r = await api('GET', `/v1/clusters/${clusterId}/proxy?include_access_logs=true`);
      const mapping = (r.body['data'].port_mappings as AnswerBody[]).find((m) => m['id'] === httpPortId)!;
      expect(mapping['usage_statistics'].total_requests).toBeGreaterThan(5);
      expect(mapping['usage_statistics'].unique_visitors).toBeGreaterThanOrEqual(2); // the owner, and a public visitor
      expect(mapping['usage_statistics'].avg_response_time_ms).toBeGreaterThan(0);
      const logs = r.body['data'].access_logs as AnswerBody[];
      expect(logs.some((l) => l['status_code'] === 429)).toBe(true);
      expect(logs.some((l) => l['status_code'] === 401 && l['user'] === null)).toBe(true);
      expect(logs.find((l) => l['status_code'] === 200 && l['user'] !== null)?.['user']).toBe(t.userId);
      expect(r.body['meta']).toMatchObject({ total_port_mappings: 3, proxy_version: expect.any(String) });

      const clash = await api('POST', `/v1/clusters/${clusterId}/proxy/ports`, {
        internal_port: 8080,
        description: 'again',
      });
      expect(clash.status).toBe(409);
      expect(clash.body['error'].code).toBe('PORT_CONFLICT');
      const ext = await api('POST', `/v1/clusters/${clusterId}/proxy/ports`, {
        internal_port: 7000,
        external_port: 30000,
        description: 'x',
      });
      expect(ext.body['error'].code).toBe('PORT_CONFLICT');

      const off = await api('PUT', `/v2/clusters/${clusterId}/proxy`, { enabled: false });
      expect(off.body).toEqual({ proxyUrl: `https://${host(8080)}:${proxyPort}`, enabled: false });
      expect((await curl(8080, '/', bearer())).status).toBe(503);
      await api('PUT', `/v1/clusters/${clusterId}/proxy`, { enabled: true });

      const gone = await api('DELETE', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`);
      expect(gone.status).toBe(200);
      expect(
        (await api('DELETE', `/v1/clusters/${clusterId}/proxy/ports/${httpPortId}`)).body['error'].code,
      ).toBe('PORT_MAPPING_NOT_FOUND');
      expect((await curl(8080, '/', bearer())).status).toBe(404);
    });
  },
);

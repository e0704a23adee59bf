import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { request } from 'node:https';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { ApiError, newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../control-plane/src/db/index.ts';
import { openPostgres } from '../../control-plane/src/db/index.ts';
import type { ExecSession, TunnelOpener } from '../../control-plane/src/fleet/tunnels/types.ts';
import type { AccessLogEntry } from '../../control-plane/src/proxy/traffic.ts';
import { createTestApp, ShiftedClock, type TestApp, waitFor } from '../../control-plane/src/testing/index.ts';

/**
 * TEST DOUBLE for the agents' reverse tunnels (contract 4): every container port is one HTTP server on
 * loopback. What these tests prove is about the proxy's state shared between replicas, not about how
 * bytes reach a container (proxy.e2e and proxy-agent.e2e cover that).
 */
class LoopbackTunnels implements TunnelOpener {
  constructor(private readonly port: () => number) {}

  openStream(): Promise<Duplex> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: this.port() });
      socket.once('connect', () => resolve(socket));
      socket.once('error', (error) =>
        reject(new ApiError('AGENT_COMMAND_FAILED', `loopback backend: ${error.message}`)),
      );
    });
  }

  openExec(): Promise<ExecSession> {
    return Promise.reject(new Error('LoopbackTunnels (test double) does not implement openExec'));
  }
}

/** What these tests read of the API's answers. */
interface ApiBody {
  data: {
    url?: string;
    port_mappings?: { id: string; usage_statistics: { total_requests: number; unique_visitors: number } }[];
    access_logs?: AccessLogEntry[];
  };
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * Two control-plane apps over one database, each running its HTTPS proxy, as two replicas behind one
 * address would: rate limits, max_concurrent_sessions, access logs and usage statistics hold across them.
 */
describe('HTTPS port proxy across two control-plane replicas on one database', () => {
  let a: TestApp;
  let b: TestApp;
  let bDb: Database;
  let backend: Server;
  let dataDir: string;
  let ca: Buffer;
  let portId: string;
  const clusterId = newId('cluster');
  const host = `${clusterId.replace('_', '-')}-8080.proxy.localhost`;
  const replicas = () => [a, b] as const;

  function get(replica: TestApp, path: string, headers: Record<string, string> = {}): Promise<Answer> {
    const port = replica.context.proxy.port!;
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          path,
          servername: host,
          ca,
          agent: false,
          headers: { host: `${host}:${port}`, ...headers },
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            body += chunk;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });
  }

  const withKey = (agent: string) => ({ authorization: `Bearer ${a.ownerKey}`, 'user-agent': agent });

  async function api(method: 'GET' | 'PUT' | 'POST', url: string, payload?: object) {
    const res = await a.app.inject({ method, url, headers: a.auth(), ...(payload ? { payload } : {}) });
    return { status: res.statusCode, body: res.json() as ApiBody };
  }

  /** Both replicas' time: the tests skip ahead on it rather than sleep. */
  const clock = new ShiftedClock();
  /** Settings reach the other replica once its cached route (2 s) expires. */
  const routeCacheExpiry = () => clock.advance(2_100);

  const until = <T>(what: string, check: () => Promise<T>) => waitFor(what, check, 30_000, 200);

  beforeAll(async () => {
    backend = createServer((req, res) => res.end(`backend saw ${req.url}`));
    await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
    const tunnels = new LoopbackTunnels(() => (backend.address() as AddressInfo).port);
    // One data directory: both replicas serve the same development CA and certificate.
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-proxy-replicas-'));
    const env = { ANVIL_PROXY_PORT: '0', ANVIL_DATA_DIR: dataDir, ANVIL_HOST: '127.0.0.1' };
    a = await createTestApp({ env, clock, seams: { proxyTunnels: tunnels } });
    // On PostgreSQL the second replica gets its own connection pool, as a second process would.
    bDb = a.database.url ? openPostgres(a.database.url, 3) : a.database.db;
    b = await createTestApp({
      env,
      clock,
      seams: { proxyTunnels: tunnels },
      database: { db: bDb, url: a.database.url, drop: async () => {} },
    });
    for (const replica of replicas()) await replica.context.proxy.start();
    ca = await readFile(join(dataDir, 'proxy-tls', 'ca.crt'));
    await a.context.db.prisma.cluster.create({
      data: {
        id: clusterId,
        accountId: a.accountId,
        ownerId: a.userId,
        name: 'replicas',
        status: 'running',
        gpuType: 'H100',
        gpuCount: 1,
        cpuCores: 1,
        memoryGb: 1,
        storageGb: 1,
        dockerImage: 'x',
        command: [],
        ports: [{ internal_port: 8080, protocol: 'tcp', description: 'http' }],
        gpuIndices: [],
      },
    });
    const config = await api('GET', `/v1/clusters/${clusterId}/proxy`);
    portId = config.body.data.port_mappings![0]!.id;
  }, 300_000);

  afterAll(async () => {
    await b?.context.proxy.stop(1_000);
    await a?.context.proxy.stop(1_000);
    await b?.app.close();
    await b?.context.stop();
    if (bDb && bDb !== a?.database.db) await bDb.close();
    await a?.close();
    await new Promise((resolve) => backend?.close(resolve));
    await rm(dataDir, { recursive: true, force: true });
  }, 120_000);

  it('enforces a port rate_limit and a global_limit across both replicas, and logs the traffic of both', async () => {
    // Both limits count in 10-minute windows (burst_size / requests_per_minute): start well inside one.
    const windowMs = 600_000;
    const left = windowMs - (clock.now().getTime() % windowMs);
    if (left < 60_000) clock.advance(left + 100);

    const port = await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${portId}`, {
      access_control: { rate_limit: { requests_per_minute: 2, burst_size: 20 } },
    });
    expect(port.status).toBe(200);
    routeCacheExpiry();
    const served = { 'replica-a': 0, 'replica-b': 0 };
    let admitted = 0;
    let retryAfter = '';
    for (let i = 0; i < 40; i++) {
      const agent = i % 2 === 0 ? 'replica-a' : 'replica-b';
      const res = await get(i % 2 === 0 ? a : b, `/n/${i}`, withKey(agent));
      if (res.status === 200) {
        admitted++;
        served[agent]++;
        expect(res.body).toBe(`backend saw /n/${i}`);
      } else {
        expect(res.status).toBe(429);
        retryAfter = String(res.headers['retry-after']);
      }
    }
    // Limit 20, two replicas, A = max(1, floor(20 / 100)) = 1: at most N*A - 1 = 1 above the limit.
    // Counted per replica, as before, each would have admitted 20.
    expect(admitted).toBeGreaterThanOrEqual(20);
    expect(admitted).toBeLessThanOrEqual(21);
    expect(served['replica-a']).toBeGreaterThan(0);
    expect(served['replica-b']).toBeGreaterThan(0);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(retryAfter)).toBeLessThanOrEqual(600);

    // Access logs and usage statistics, read through replica a, hold the requests of both.
    const seen = await until('both replicas in the access logs and usage statistics', async () => {
      const r = await api('GET', `/v1/clusters/${clusterId}/proxy?include_access_logs=true`);
      const logs = r.body.data.access_logs!;
      const stats = r.body.data.port_mappings![0]!.usage_statistics;
      return logs.length === 40 && stats.total_requests === admitted ? { logs, stats } : null;
    });
    for (const agent of ['replica-a', 'replica-b']) {
      const mine = seen.logs.filter((l) => l.user_agent === agent);
      expect(mine).toHaveLength(20);
      expect(mine.filter((l) => l.status_code === 200)).toHaveLength(served[agent as keyof typeof served]);
      expect(mine.every((l) => l.user === a.userId && l.client_ip.endsWith('127.0.0.1'))).toBe(true);
    }
    expect(seen.logs[0]!.path).toBe('/n/39');
    expect(seen.stats.unique_visitors).toBe(1);

    // The global limit: per cluster, whoever asks.
    await api('PUT', `/v1/clusters/${clusterId}/proxy/ports/${portId}`, {
      access_control: { rate_limit: null },
    });
    const global = await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, {
      rate_limiting: { global_limit: { requests_per_minute: 1, burst_size: 10 } },
    });
    expect(global.status).toBe(200);
    routeCacheExpiry();
    let globalAdmitted = 0;
    for (let i = 0; i < 24; i++) {
      const res = await get(i % 2 === 0 ? a : b, '/g', withKey('global'));
      if (res.status === 200) globalAdmitted++;
      else expect(res.status).toBe(429);
    }
    expect(globalAdmitted).toBeGreaterThanOrEqual(10);
    expect(globalAdmitted).toBeLessThanOrEqual(11);
    await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, { rate_limiting: { global_limit: null } });
  }, 180_000);

  it('caps live login sessions at max_concurrent_sessions across both replicas', async () => {
    const set = await api('PUT', `/v1/clusters/${clusterId}/proxy/access`, { max_concurrent_sessions: 2 });
    expect(set.status).toBe(200);
    // No wait for the other replica's cached route: the limit is read under the lock at each login.
    const links: string[] = [];
    for (let i = 0; i < 6; i++) {
      const link = await api('POST', `/v1/clusters/${clusterId}/proxy/ports/${portId}/login-link`, {});
      expect(link.status).toBe(201);
      const url = new URL(link.body.data.url!);
      links.push(url.pathname + url.search);
    }
    // All at once, half through each replica (sessions.test.ts forces the race itself).
    const answers = await Promise.all(links.map((path, i) => get(i % 2 === 0 ? a : b, path)));
    const statuses = answers.map((r) => r.status);
    expect(statuses.filter((s) => s === 302)).toHaveLength(2);
    expect(statuses.filter((s) => s === 429)).toHaveLength(4);
    expect(await a.context.db.prisma.proxySession.count({ where: { clusterId, kind: 'session' } })).toBe(2);
  }, 120_000);
});

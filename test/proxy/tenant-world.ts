import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { ApiError, newId } from '@anvil/shared';
import type { ExecSession, TunnelOpener } from '../../control-plane/src/fleet/tunnels/types.ts';
import { clusterRow } from '../../control-plane/src/testing/cluster-row.ts';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';

/** Not `localhost`: browsers treat `*.localhost` specially; `.test` is reserved and never resolves. */
export const PROXY_DOMAIN = 'proxy.anvil.test';

/** What a tenant's application saw of one request (after the proxy). */
export interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

/**
 * A tenant's application on loopback standing in for its container: records every request and answers
 * `/echo` with what it saw, `/plant` with a cookie scoped to the whole proxy domain, `/reflect` with
 * credentialed CORS for any origin, `/page` with `html`.
 */
export class TenantApp {
  readonly seen: Seen[] = [];
  html = '<!doctype html><title>tenant</title>';
  private constructor(readonly server: Server) {}

  static async start(): Promise<TenantApp> {
    const server = createServer();
    const app = new TenantApp(server);
    server.on('request', (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        app.seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
        if (req.url === '/plant') {
          res.writeHead(200, {
            'content-type': 'text/html',
            'set-cookie': [
              `planted=from-a; Domain=.${PROXY_DOMAIN}; Path=/; Secure; SameSite=Lax`,
              `also=from-a; path=/; domain=${PROXY_DOMAIN}; Secure`,
              'own=kept; Path=/; Secure',
              '__Host-anvil_proxy_session=forged; Path=/; Secure',
            ],
          });
          res.end('<!doctype html><title>planted</title>');
          return;
        }
        if (req.url === '/reflect') {
          // An application that grants credentialed CORS to whoever asks.
          res.writeHead(200, {
            'content-type': 'application/json',
            'access-control-allow-origin': req.headers.origin ?? '*',
            'access-control-allow-credentials': 'true',
          });
          res.end('{"secret":true}');
          return;
        }
        if (req.url?.startsWith('/page')) {
          res.writeHead(200, { 'content-type': 'text/html' });
          res.end(app.html);
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ method: req.method, url: req.url, cookie: req.headers.cookie ?? null }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return app;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * TEST DOUBLE for the agents' reverse tunnels: `net.connect` to the loopback application registered
 * for the workload, whatever container port is asked for. It carries the bytes a real tunnel would.
 */
export class LoopbackTunnels implements TunnelOpener {
  readonly apps = new Map<string, number>();

  openStream(workloadId: string, _port: number): Promise<Duplex> {
    const port = this.apps.get(workloadId);
    if (port === undefined) return Promise.reject(new ApiError('WORKLOAD_NOT_FOUND', workloadId));
    return new Promise<Socket>((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port });
      socket.once('connect', () => resolve(socket));
      socket.once('error', (error) => reject(new ApiError('AGENT_COMMAND_FAILED', error.message)));
    });
  }

  openExec(): Promise<ExecSession> {
    return Promise.reject(new Error('LoopbackTunnels (test double) does not implement openExec'));
  }
}

export interface Tenant {
  clusterId: string;
  portId: string;
  app: TenantApp;
  /** `cluster-<id>-8080.<domain>` */
  host: string;
  origin: string;
}

export interface ProxyAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** The test app with its HTTPS proxy listening on loopback and clusters whose port 8080 is a TenantApp. */
export class TenantWorld {
  private constructor(
    readonly t: TestApp,
    readonly tunnels: LoopbackTunnels,
    readonly ca: Buffer,
    private readonly dataDir: string,
    private readonly apps: TenantApp[] = [],
  ) {}

  static async start(): Promise<TenantWorld> {
    const dataDir = await mkdtemp(join(tmpdir(), 'anvil-tenants-'));
    const tunnels = new LoopbackTunnels();
    const t = await createTestApp({
      env: { ANVIL_PROXY_PORT: '0', ANVIL_DATA_DIR: dataDir, ANVIL_PROXY_DOMAIN: PROXY_DOMAIN },
      seams: { proxyTunnels: tunnels },
    });
    await t.context.proxy.start();
    const ca = await readFile(join(dataDir, 'proxy-tls', 'ca.crt'));
    return new TenantWorld(t, tunnels, ca, dataDir);
  }

  get proxyPort(): number {
    return this.t.context.proxy.port!;
  }

  /** A running cluster of the account with port 8080 mapped to a fresh TenantApp. */
  async tenant(name: string, accessControl: Record<string, unknown> = {}): Promise<Tenant> {
    const clusterId = newId('cluster');
    await this.t.context.db.prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId: this.t.accountId, ownerId: this.t.userId, name }),
    });
    const app = await TenantApp.start();
    this.apps.push(app);
    this.tunnels.apps.set(clusterId, app.port);
    const created = await this.t.app.inject({
      method: 'POST',
      url: `/v1/clusters/${clusterId}/proxy/ports`,
      headers: this.t.auth(),
      payload: { internal_port: 8080, description: name, access_control: accessControl },
    });
    if (created.statusCode !== 201) throw new Error(`port mapping: ${created.body}`);
    const host = `${clusterId.replace('_', '-')}-8080.${PROXY_DOMAIN}`;
    return {
      clusterId,
      portId: created.json().data.id,
      app,
      host,
      origin: `https://${host}:${this.proxyPort}`,
    };
  }

  /** A one-time login link's path and query (the caller's key decides whose session it becomes). */
  async loginPath(
    tenant: Tenant,
    key = this.t.ownerKey,
    next?: string,
  ): Promise<ProxyAnswer & { path: string }> {
    const answer = await this.t.app.inject({
      method: 'POST',
      url: `/v1/clusters/${tenant.clusterId}/proxy/ports/${tenant.portId}/login-link`,
      headers: this.t.auth(key),
      payload: next === undefined ? {} : { next },
    });
    const url = answer.statusCode === 201 ? new URL(answer.json().data.url) : null;
    return {
      status: answer.statusCode,
      headers: answer.headers as IncomingHttpHeaders,
      body: answer.body,
      path: url ? url.pathname + url.search : '',
    };
  }

  /** A session cookie value for `tenant`, through a login link of `key`'s member. */
  async sessionCookie(tenant: Tenant, key = this.t.ownerKey): Promise<string> {
    const link = await this.loginPath(tenant, key);
    if (link.status !== 201) throw new Error(`login link: ${link.body}`);
    const login = await this.request(tenant, 'GET', link.path);
    const setCookie = String(login.headers['set-cookie'] ?? '');
    const match = /^((?:__Host-)?anvil_proxy_session=[^;]+)/.exec(setCookie);
    if (!match) throw new Error(`no session cookie in ${login.status} ${setCookie}`);
    return match[1]!;
  }

  /** One HTTPS request to the proxy on loopback, presenting the tenant's host (SNI and Host). */
  request(
    tenant: Tenant,
    method: string,
    path: string,
    headers: Record<string, string> = {},
    body?: string,
  ): Promise<ProxyAnswer> {
    return new Promise((resolve, reject) => {
      const req = httpsRequest(
        {
          host: '127.0.0.1',
          port: this.proxyPort,
          servername: tenant.host,
          ca: this.ca,
          method,
          path,
          agent: false,
          headers: { host: `${tenant.host}:${this.proxyPort}`, ...headers },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              body: Buffer.concat(chunks).toString('utf8'),
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  async close(): Promise<void> {
    await this.t.context.proxy.stop(1_000);
    await this.t.close();
    for (const app of this.apps) await app.close();
    await rm(this.dataDir, { recursive: true, force: true });
  }
}

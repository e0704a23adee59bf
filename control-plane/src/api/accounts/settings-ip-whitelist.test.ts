import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addAccount } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { clusterRow } from '../../testing/cluster-row.ts';
import { tryUpgrade } from '../../testing/ws-upgrade.ts';

const run = promisify(execFile);

interface Answer {
  status: number;
  body: string;
  json: () => { error?: string; details?: Record<string, unknown> } & Record<string, unknown>;
}

/** One HTTP request over loopback from a chosen source address (127.0.0.0/8 is all loopback). */
function send(
  url: string,
  options: { from: string; method?: string; headers?: Record<string, string>; body?: unknown },
): Promise<Answer> {
  const target = new URL(url);
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname.replace(/^\[|\]$/g, ''),
        port: target.port,
        path: `${target.pathname}${target.search}`,
        method: options.method ?? 'GET',
        localAddress: options.from,
        headers: {
          ...(payload ? { 'content-type': 'application/json' } : {}),
          ...options.headers,
        },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, json: () => JSON.parse(body) }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/**
 * security.api_access.ip_whitelist with require_ip_whitelist on: the API request guard, the port proxy,
 * the SSH relay and the web terminal refuse other addresses; X-Forwarded-For counts only from
 * ANVIL_TRUSTED_PROXIES; a change that would lock the caller out needs confirm_lockout=true.
 */
describe('account ip_whitelist', () => {
  let t: TestApp;
  let dataDir: string;
  let api: string;
  let v6Server: Server;
  let v6: string;

  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-ipwl-'));
    t = await createTestApp({
      env: {
        ANVIL_DATA_DIR: dataDir,
        ANVIL_TRUSTED_PROXIES: '127.0.0.3',
        ANVIL_HOST: '127.0.0.1',
        ANVIL_PROXY_PORT: '0',
      },
    });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    api = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
    // The same app over IPv6 loopback.
    v6Server = createServer(t.app.routing);
    v6Server.listen(0, '::1');
    await once(v6Server, 'listening');
    v6 = `http://[::1]:${(v6Server.address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    await new Promise((resolve) => v6Server.close(resolve));
    await t.context.proxy.stop(0);
    await t.context.ssh.close();
    await t.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  const owner = () => ({ authorization: `Bearer ${t.ownerKey}` });
  const putSecurity = (from: string, body: unknown, query = '') =>
    send(`${api}/v2/accounts/settings/security${query}`, { from, method: 'PUT', headers: owner(), body });
  const readSettings = (from: string, headers: Record<string, string> = {}, base = api) =>
    send(`${base}/v2/accounts/settings`, { from, headers: { ...owner(), ...headers } });
  const enforce = async (list: string[]) => {
    const res = await putSecurity(
      '127.0.0.2',
      { api_access: { ip_whitelist: list, require_ip_whitelist: true } },
      '?confirm_lockout=true',
    );
    expect(res.status, res.body).toBe(200);
  };

  it('ip-whitelist: the API guard enforces IPv4 and IPv6 entries, refuses a lock-out unless confirmed, and reads X-Forwarded-For only from trusted proxies', async () => {
    const list = ['127.0.0.2/32', '::1', '2001:db8::/32'];
    // From 127.0.0.1, a list without it is a lock-out: refused, nothing written.
    const lockout = await putSecurity('127.0.0.1', {
      api_access: { ip_whitelist: list, require_ip_whitelist: true },
    });
    expect(lockout.status, lockout.body).toBe(400);
    expect(lockout.json()).toMatchObject({
      error: 'CONFIRMATION_REQUIRED',
      details: {
        field: 'security.api_access.ip_whitelist',
        caller_ip: '127.0.0.1',
        required_field: 'confirm_lockout',
      },
    });
    expect(await t.context.db.prisma.accountSettings.count()).toBe(0);
    expect((await readSettings('127.0.0.1')).status).toBe(200);

    // From an address on the list no confirmation is needed.
    const applied = await putSecurity('127.0.0.2', {
      api_access: { ip_whitelist: list, require_ip_whitelist: true },
    });
    expect(applied.status, applied.body).toBe(200);

    const outside = await readSettings('127.0.0.1');
    expect(outside.status).toBe(403);
    expect(outside.json()).toMatchObject({ error: 'IP_NOT_ALLOWED', details: { ip: '127.0.0.1' } });
    expect((await readSettings('127.0.0.2')).status).toBe(200);
    expect((await readSettings('::1', {}, v6)).status).toBe(200);
    // Another account keeps no list: its owner is not affected.
    const other = await addAccount(t);
    expect(
      (
        await send(`${api}/v2/accounts/settings`, {
          from: '127.0.0.1',
          headers: { authorization: `Bearer ${other.key}` },
        })
      ).status,
    ).toBe(200);

    // X-Forwarded-For from an untrusted peer is ignored; from the trusted proxy it names the client.
    expect((await readSettings('127.0.0.1', { 'x-forwarded-for': '127.0.0.2' })).status).toBe(403);
    expect((await readSettings('127.0.0.3', { 'x-forwarded-for': '127.0.0.2' })).status).toBe(200);
    expect((await readSettings('127.0.0.3', { 'x-forwarded-for': '127.0.0.9' })).status).toBe(403);
    // A client cannot prepend a listed address: the hop the trusted proxy appended is the client.
    expect((await readSettings('127.0.0.3', { 'x-forwarded-for': '127.0.0.2, 127.0.0.9' })).status).toBe(403);
    // The proxy itself is not a client: without the header it is judged by its own address.
    expect((await readSettings('127.0.0.3')).status).toBe(403);

    // Changing the list so that it leaves out the caller needs the confirmation too.
    const narrowed = await putSecurity('127.0.0.2', { api_access: { ip_whitelist: ['10.0.0.0/8'] } });
    expect(narrowed.status).toBe(400);
    expect(narrowed.json().error).toBe('CONFIRMATION_REQUIRED');
    expect((await readSettings('127.0.0.2')).status).toBe(200);
    const confirmed = await putSecurity(
      '127.0.0.2',
      { api_access: { ip_whitelist: ['10.0.0.0/8'] } },
      '?confirm_lockout=true',
    );
    expect(confirmed.status, confirmed.body).toBe(200);
    expect((await readSettings('127.0.0.2')).status).toBe(403);
    expect((await readSettings('::1', {}, v6)).status).toBe(403);
  });

  it('ip-whitelist: the import route has the same lock-out protection', async () => {
    const doc = {
      settings: { security: { api_access: { ip_whitelist: ['10.1.0.0/16'], require_ip_whitelist: true } } },
    };
    const refused = await send(`${api}/v2/accounts/settings/import`, {
      from: '127.0.0.1',
      method: 'POST',
      headers: owner(),
      body: doc,
    });
    expect(refused.status).toBe(400);
    expect(refused.json().error).toBe('CONFIRMATION_REQUIRED');
    expect(await t.context.db.prisma.accountSettings.count()).toBe(0);
    const confirmed = await send(`${api}/v2/accounts/settings/import?confirm_lockout=true`, {
      from: '127.0.0.1',
      method: 'POST',
      headers: owner(),
      body: doc,
    });
    expect(confirmed.status, confirmed.body).toBe(200);
    expect((await readSettings('127.0.0.1')).status).toBe(403);
  });

  it('ip-whitelist: the port proxy refuses a client outside the list before authentication', async () => {
    const clusterId = newId('cluster');
    await t.context.db.prisma.cluster.create({
      data: clusterRow({
        id: clusterId,
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'ipwl',
        ports: [{ internal_port: 8888, protocol: 'tcp' }],
      }),
    });
    await t.context.proxy.start();
    const port = t.context.proxy.port!;
    const host = `${clusterId.replace('_', '-')}-8888.proxy.localhost`;
    const proxied = (from: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = httpsRequest(
          {
            host: '127.0.0.1',
            port,
            path: '/',
            servername: host,
            headers: { host },
            localAddress: from,
            ca: t.context.proxy.caCertificate!,
          },
          (res) => {
            let body = '';
            res.on('data', (chunk: Buffer) => {
              body += chunk.toString();
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          },
        );
        req.on('error', reject);
        req.end();
      });
    const before = await proxied('127.0.0.1');
    expect(before.status).not.toBe(403);
    await enforce(['127.0.0.2']);
    const outside = await proxied('127.0.0.1');
    expect(outside.status).toBe(403);
    expect(outside.body).toContain('IP_NOT_ALLOWED');
    const inside = await proxied('127.0.0.2');
    expect(inside.status).toBe(before.status);
  });

  it('ip-whitelist: the SSH relay refuses a member key from outside the list', async () => {
    const keyFile = join(dataDir, 'id_ed25519');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', keyFile]);
    const added = await send(`${api}/v2/accounts/profile/ssh-keys`, {
      from: '127.0.0.1',
      method: 'POST',
      headers: owner(),
      body: { name: 'laptop', public_key: (await readFile(`${keyFile}.pub`, 'utf8')).trim() },
    });
    expect(added.status, added.body).toBe(201);
    const clusterId = newId('cluster');
    await t.context.db.prisma.cluster.create({
      data: clusterRow({
        id: clusterId,
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'ssh',
        sshEnabled: true,
      }),
    });
    const { port } = await t.context.ssh.listen(0, '127.0.0.1');
    const ssh = (from: string) =>
      run('ssh', [
        '-v',
        '-b',
        from,
        '-p',
        String(port),
        '-i',
        keyFile,
        '-o',
        'IdentitiesOnly=yes',
        '-o',
        'BatchMode=yes',
        '-o',
        'StrictHostKeyChecking=no',
        '-o',
        'UserKnownHostsFile=/dev/null',
        '-o',
        'ConnectTimeout=10',
        `${clusterId}@127.0.0.1`,
        'true',
      ]).then(
        (out) => out.stderr,
        (error: { stderr?: string }) => error.stderr ?? '',
      );
    await enforce(['127.0.0.2']);
    const outside = await ssh('127.0.0.1');
    expect(outside).toContain('Permission denied');
    expect(outside).not.toContain('Authenticated to');
    // From the list the key is accepted (the session then fails: the cluster has no container).
    const inside = await ssh('127.0.0.2');
    expect(inside).toContain('Authenticated to');
  });

  it('ip-whitelist: the web terminal refuses an upgrade from outside the list', async () => {
    const clusterId = newId('cluster');
    await t.context.db.prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId: t.accountId, ownerId: t.userId, name: 'term' }),
    });
    await enforce(['127.0.0.2']);
    const upgrade = (from: string) =>
      tryUpgrade(`${api.replace('http', 'ws')}/v1/clusters/${clusterId}/terminal`, {
        headers: owner(),
        localAddress: from,
      });
    const outside = await upgrade('127.0.0.1');
    expect(outside.status).toBe(403);
    expect(outside.body).toContain('IP_NOT_ALLOWED');
    const inside = await upgrade('127.0.0.2');
    expect(inside.body).not.toContain('IP_NOT_ALLOWED');
  });
});

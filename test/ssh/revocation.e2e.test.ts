import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { newId } from '@anvil/shared';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { addMember, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/index.ts';
import { workloadSpecInput } from '../agent/fixtures.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail, TEST_LABEL, testDocker } from '../fixtures/images/docker.ts';
import { clientOptions, type Keypair, keygen, type SshWorld, startSshWorld, waitFor } from './fixtures.ts';

/** Generous bound for "within seconds": the machines running these tests are heavily loaded. */
const ENDS_WITHIN_MS = 60_000;
/** A custom role with no cluster permissions: members holding it reach the cluster only through a share. */
const OUTSIDER_ROLE = 'role_custom_outsider';
const LIMIT = 2;

interface Answer {
  status: number;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A log stream (SSE) held open over real HTTP; `ended` once the server ends it. */
interface OpenStream {
  status: number;
  text: () => string;
  ended: () => boolean;
  close: () => void;
}

/** An `ssh` session held open (a remote `sleep`), with its output and exit. */
interface OpenSsh {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  exit: () => number | null | undefined;
}

/** A terminal WebSocket: its messages and how it closed. */
interface OpenTerminal {
  ws: WebSocket;
  messages: { type: string; code?: string; message?: string }[];
  closed: () => { code: number; reason: string } | null;
}

/**
 * Sessions end when access ends: for each way a member loses access (their keys revoked, suspended,
 * removed, the cluster unshared), the proxy cookie stops working and the open SSH connection, web
 * terminal and log stream end, all over the real paths (HTTPS proxy, OpenSSH client, WebSocket, SSE)
 * into a real container. Then the per-account limits on those sessions.
 */
describe.skipIf(!dockerOrFail('test/ssh/revocation.e2e.test.ts'))(
  'access revocation ends open sessions; per-account session limits',
  () => {
    let docker: Dockerode;
    let dir: string;
    let world: SshWorld;
    let t: TestApp;
    let clusterId: string;
    let proxyPort: number;
    let ca: string;
    /** Whatever a case left open when it failed: ended in afterAll. */
    const leftovers: (() => void)[] = [];

    const proxyHost = (port: number) => new URL(t.context.proxy.urlFor(clusterId, port)).hostname;

    /** One HTTPS request to the proxy over loopback, with the cluster port's host name. */
    const proxyGet = (port: number, path: string, headers: Record<string, string> = {}) =>
      new Promise<Answer>((resolve, reject) => {
        const host = proxyHost(port);
        const req = httpsRequest(
          {
            host: '127.0.0.1',
            port: proxyPort,
            path,
            servername: host,
            ca,
            headers: { host: `${host}:${proxyPort}`, ...headers },
            agent: false,
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

    const api = async (
      method: 'GET' | 'POST' | 'PUT' | 'DELETE',
      url: string,
      headers: { authorization: string },
      payload?: object,
    ) => t.app.inject({ method, url, headers, ...(payload ? { payload } : {}) });

    /** A member reaching the cluster only through a share (read, write, execute), with an SSH key. */
    async function sharedMember(
      name: string,
    ): Promise<{ member: TestMember; key: Keypair; shareId: string }> {
      const member = await addMember(t, { role: OUTSIDER_ROLE });
      const shared = await api('POST', `/v2/accounts/permissions/resources/${clusterId}/share`, t.auth(), {
        users: [member.userId],
        permissions: ['read', 'write', 'execute'],
      });
      expect(shared.statusCode, shared.body).toBe(200);
      const share = await t.context.db.prisma.resourceShare.findFirstOrThrow({
        where: { userId: member.userId, resourceId: clusterId, status: 'active' },
      });
      const key = keygen(dir, name);
      const added = await api('POST', '/v2/accounts/profile/ssh-keys', member.headers, {
        name,
        public_key: key.pub,
      });
      expect(added.statusCode, added.body).toBe(201);
      return { member, key, shareId: share.id };
    }

    /** Logs in through a one-time link; answers the cookie header to send. */
    async function proxyLogin(member: TestMember): Promise<string> {
      const mapping = await t.context.db.prisma.proxyPortMapping.findFirstOrThrow({
        where: { clusterId, internalPort: 8080 },
      });
      const link = await api(
        'POST',
        `/v1/clusters/${clusterId}/proxy/ports/${mapping.id}/login-link`,
        member.headers,
        {},
      );
      expect(link.statusCode, link.body).toBe(201);
      const url = new URL(link.json().data.url);
      const login = await proxyGet(8080, `${url.pathname}${url.search}`);
      expect(login.status, login.body).toBe(302);
      const setCookie = login.headers['set-cookie']?.[0] ?? '';
      return setCookie.split(';')[0]!;
    }

    function openSsh(key: Keypair, command: string): OpenSsh {
      const child = spawn(
        'ssh',
        ['-p', String(world.port), ...clientOptions(key), `${clusterId}@127.0.0.1`, command],
        { stdio: ['pipe', 'pipe', 'pipe'] },
      );
      leftovers.push(() => child.kill('SIGKILL'));
      let stdout = '';
      let stderr = '';
      let exit: number | null | undefined;
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString('utf8');
      });
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString('utf8');
      });
      child.on('close', (code) => {
        exit = code;
      });
      return { child, stdout: () => stdout, stderr: () => stderr, exit: () => exit };
    }

    async function openTerminal(member: TestMember): Promise<OpenTerminal | number> {
      const created = await api('POST', `/v1/clusters/${clusterId}/terminal/sessions`, member.headers, {
        cols: 80,
        rows: 24,
      });
      if (created.statusCode !== 201) return created.statusCode;
      const path = created.json().data.websocket_path as string;
      const ws = new WebSocket(`${world.url.replace(/^http/, 'ws')}${path}`);
      const messages: OpenTerminal['messages'] = [];
      let closed: { code: number; reason: string } | null = null;
      ws.on('message', (raw) => messages.push(JSON.parse(raw.toString())));
      ws.on('close', (code, reason) => {
        closed = { code, reason: reason.toString() };
      });
      ws.on('error', () => {});
      leftovers.push(() => ws.terminate());
      await waitFor('terminal ready', async () => messages.some((m) => m.type === 'ready'), 60_000);
      return { ws, messages, closed: () => closed };
    }

    function openLogStream(member: TestMember): Promise<OpenStream> {
      return new Promise((resolve, reject) => {
        const url = new URL(`${world.url}/v1/clusters/${clusterId}/logs/stream?tail=0`);
        const req = httpRequest(url, { headers: member.headers, agent: false }, (res) => {
          let text = '';
          let ended = false;
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
          });
          res.on('end', () => {
            ended = true;
          });
          res.on('close', () => {
            ended = true;
          });
          leftovers.push(() => req.destroy());
          resolve({
            status: res.statusCode ?? 0,
            text: () => text,
            ended: () => ended,
            close: () => req.destroy(),
          });
        });
        req.on('error', reject);
        req.end();
      });
    }

    beforeAll(async () => {
      docker = testDocker();
      dir = mkdtempSync(join(tmpdir(), 'anvil-revoke-'));
      world = await startSshWorld(docker, join(dir, 'data'), {
        ANVIL_PROXY_PORT: '0',
        ANVIL_MAX_TERMINAL_SESSIONS: String(LIMIT),
        ANVIL_MAX_LOG_STREAMS: String(LIMIT),
        ANVIL_MAX_SSH_CONNECTIONS: String(LIMIT),
        ANVIL_MAX_PROXY_WEBSOCKETS: String(LIMIT),
      });
      t = world.t;
      await t.context.proxy.start();
      proxyPort = t.context.proxy.port!;
      ca = readFileSync(join(dir, 'data', 'proxy-tls', 'ca.crt'), 'utf8');
      await t.context.db.prisma.customRole.create({
        data: {
          accountId: t.accountId,
          id: OUTSIDER_ROLE,
          name: 'outsider',
          displayName: 'Outsider',
          permissions: ['read'],
          scopes: ['endpoints'],
          inherits: [],
        },
      });

      // The cluster: busybox httpd on 8080 and a TCP echo (any upgrade is held open) on 9000.
      clusterId = newId('cluster');
      const name = `revoke-${clusterId.slice(-6)}`;
      await t.context.db.prisma.cluster.create({
        data: {
          id: clusterId,
          accountId: t.accountId,
          ownerId: t.userId,
          name,
          status: 'running',
          gpuType: 'H100',
          gpuCount: 1,
          cpuCores: 1,
          memoryGb: 1,
          storageGb: 1,
          dockerImage: BUSYBOX_IMAGE,
          command: [],
          sshEnabled: true,
          hostId: world.hostId,
          ports: [
            { internal_port: 8080, protocol: 'tcp', description: 'httpd' },
            { internal_port: 9000, protocol: 'tcp', description: 'echo' },
          ],
        },
      });
      await t.context.db.prisma.resource.create({
        data: { id: clusterId, accountId: t.accountId, type: 'cluster', name, ownerId: t.userId },
      });
      await t.context.fleet.workloads.create({
        id: clusterId,
        hostId: world.hostId,
        kind: 'cluster',
        ownerAccountId: t.accountId,
        spec: workloadSpecInput({
          image: BUSYBOX_IMAGE,
          command: [
            'sh',
            '-c',
            'mkdir -p /www && echo hello-from-httpd > /www/index.html && (nc -ll -p 9000 -e /bin/cat &) && exec httpd -f -p 8080 -h /www',
          ],
          env: { HOME: '/root' },
          labels: { [TEST_LABEL]: '1' },
        }),
      });
      await waitFor(
        `cluster ${clusterId} running`,
        async () => {
          const view = await t.context.fleet.workloads.get(clusterId);
          return view.phase === 'running' && view.actualStatus?.ipAddress ? view : null;
        },
        120_000,
      );
      // The owner's key reaches httpd through the tunnel before any case runs.
      await waitFor(
        'httpd through the proxy',
        async () => (await proxyGet(8080, '/index.html', t.auth())).status === 200,
        120_000,
      );
    }, 400_000);

    afterAll(async () => {
      for (const end of leftovers) end();
      await t?.context.proxy.stop(1_000);
      await world?.close();
      rmSync(dir, { recursive: true, force: true });
    }, 240_000);

    const CASES: {
      name: string;
      revoke: (m: { member: TestMember; shareId: string }) => Promise<void>;
      /** The SSH refusal the relay writes as it disconnects. */
      sshReason: RegExp;
    }[] = [
      {
        name: 'keys revoked (the API key, and the SSH key the connection used)',
        async revoke({ member }) {
          const key = await t.context.db.prisma.apiKey.findFirstOrThrow({ where: { userId: member.userId } });
          const sshKey = await t.context.db.prisma.sshKey.findFirstOrThrow({
            where: { userId: member.userId },
          });
          // The SSH key first, with the member's own API key, which is revoked after.
          const deleted = await api('DELETE', `/v2/accounts/profile/ssh-keys/${sshKey.id}`, member.headers);
          expect(deleted.statusCode, deleted.body).toBe(200);
          const revoked = await api('DELETE', `/v2/auth/api-keys/${key.id}`, t.auth());
          expect(revoked.statusCode, revoked.body).toBe(200);
        },
        sshReason: /SSH key was removed/,
      },
      {
        name: 'member suspended',
        async revoke({ member }) {
          const res = await api('PUT', `/v2/accounts/team/members/${member.userId}`, t.auth(), {
            status: 'suspended',
          });
          expect(res.statusCode, res.body).toBe(200);
        },
        sshReason: /member is suspended/,
      },
      {
        name: 'member removed',
        async revoke({ member }) {
          const res = await api('DELETE', `/v2/accounts/team/members/${member.userId}`, t.auth());
          expect(res.statusCode, res.body).toBe(200);
        },
        sshReason: /member was removed/,
      },
      {
        name: 'cluster unshared',
        async revoke({ shareId }) {
          const res = await api('DELETE', `/v2/accounts/permissions/shares/${shareId}`, t.auth());
          expect(res.statusCode, res.body).toBe(200);
        },
        sshReason: /was revoked/,
      },
    ];

    it.each(CASES.map((c, i) => [c.name, i] as const))(
      '%s: the proxy cookie stops working; SSH, terminal and log stream end',
      async (_name, index) => {
        const c = CASES[index]!;
        const shared = await sharedMember(`case${index}`);
        const { member, key } = shared;

        const cookie = await proxyLogin(member);
        const before = await proxyGet(8080, '/index.html', { cookie });
        expect(before.status, before.body).toBe(200);
        expect(before.body).toContain('hello-from-httpd');

        const ssh = openSsh(key, 'echo ssh-open; exec sleep 600');
        await waitFor('ssh session open', async () => ssh.stdout().includes('ssh-open'), 60_000);
        const terminal = await openTerminal(member);
        if (typeof terminal === 'number') throw new Error(`terminal refused: ${terminal}`);
        const stream = await openLogStream(member);
        expect(stream.status).toBe(200);
        await waitFor('log stream open', async () => stream.text().includes(': connected'), 30_000);

        await c.revoke(shared);

        await waitFor(
          'proxy cookie refused',
          async () => (await proxyGet(8080, '/index.html', { cookie })).status === 401,
          ENDS_WITHIN_MS,
        );
        await waitFor(
          'proxy session deleted',
          async () =>
            (await t.context.db.prisma.proxySession.count({ where: { userId: member.userId } })) === 0,
          ENDS_WITHIN_MS,
        );
        await waitFor('ssh disconnected', async () => ssh.exit() !== undefined, ENDS_WITHIN_MS);
        expect(ssh.exit()).not.toBe(0);
        expect(ssh.stderr()).toMatch(c.sshReason);
        await waitFor('terminal closed', async () => terminal.closed() !== null, ENDS_WITHIN_MS);
        expect(terminal.closed()?.code).toBe(4001);
        expect(terminal.messages.at(-1)).toMatchObject({ type: 'error', code: 'UNAUTHORIZED' });
        await waitFor('log stream ended', async () => stream.ended(), ENDS_WITHIN_MS);
        expect(stream.text()).toMatch(/event: revoked\ndata: \{"reason":/);
      },
      180_000,
    );

    it('a revocation ends only the sessions it concerns', async () => {
      const kept = await sharedMember('kept');
      const other = await sharedMember('other');
      const keptStream = await openLogStream(kept.member);
      const otherStream = await openLogStream(other.member);
      for (const s of [keptStream, otherStream])
        await waitFor('log stream open', async () => s.text().includes(': connected'), 30_000);
      const cookie = await proxyLogin(kept.member);
      const res = await api('DELETE', `/v2/accounts/permissions/shares/${other.shareId}`, t.auth());
      expect(res.statusCode, res.body).toBe(200);
      // Once the other member's stream ended, the revocation has been applied in this process.
      await waitFor('the other member’s stream ended', async () => otherStream.ended(), ENDS_WITHIN_MS);
      expect(keptStream.ended()).toBe(false);
      expect((await proxyGet(8080, '/index.html', { cookie })).status).toBe(200);
      keptStream.close();
    }, 120_000);

    it('refuses the session past each per-account limit, and allows one again after one closes', async () => {
      const { member, key } = await sharedMember('limits');
      // Log streams: 429 with the spec's error shape.
      const streams = [await openLogStream(member), await openLogStream(member)];
      for (const s of streams) expect(s.status).toBe(200);
      const third = await api(
        'GET',
        `/v1/clusters/${clusterId}/logs/stream?tail=0&follow=false`,
        member.headers,
      );
      expect(third.statusCode, third.body).toBe(429);
      expect(third.json()).toMatchObject({
        error: {
          code: 'RATE_LIMITED',
          details: { reason: 'max_concurrent_sessions', session_kind: 'log_stream', limit: LIMIT },
        },
      });
      streams[0]!.close();
      await waitFor(
        'a stream slot free',
        async () => t.context.liveSessions.count(t.accountId, 'log_stream') < LIMIT,
      );
      const again = await openLogStream(member);
      expect(again.status).toBe(200);
      again.close();
      streams[1]!.close();

      // Terminals: 429 on POST.
      const terminals = [await openTerminal(member), await openTerminal(member)];
      for (const term of terminals) expect(typeof term).not.toBe('number');
      expect(await openTerminal(member)).toBe(429);
      const first = terminals[0] as OpenTerminal;
      const sessionId = first.messages.find((m) => m.type === 'ready') as unknown as { session_id: string };
      const closed = await api(
        'DELETE',
        `/v1/clusters/${clusterId}/terminal/sessions/${sessionId.session_id}`,
        member.headers,
      );
      expect(closed.statusCode, closed.body).toBe(200);
      const reopened = await openTerminal(member);
      expect(typeof reopened).not.toBe('number');
      for (const term of [terminals[1], reopened]) (term as OpenTerminal).ws.close();

      // SSH: the extra connection is told why, on stderr, and ends.
      const held = [openSsh(key, 'echo held; exec sleep 600'), openSsh(key, 'echo held; exec sleep 600')];
      for (const s of held) await waitFor('ssh held', async () => s.stdout().includes('held'), 60_000);
      const extra = openSsh(key, 'echo should-not-run');
      await waitFor('extra ssh refused', async () => extra.exit() !== undefined, 60_000);
      expect(extra.exit()).toBe(255);
      expect(extra.stdout()).not.toContain('should-not-run');
      expect(extra.stderr()).toMatch(/already has 2 open SSH connections/);
      held[0]!.child.kill('SIGTERM');
      await waitFor(
        'an ssh slot free',
        async () => t.context.liveSessions.count(t.accountId, 'ssh') < LIMIT,
        60_000,
      );
      const after = openSsh(key, 'echo runs-again');
      await waitFor('ssh after a close', async () => after.exit() !== undefined, 60_000);
      expect(after.stdout()).toContain('runs-again');
      held[1]!.child.kill('SIGTERM');

      // Proxy WebSockets (any upgrade, held open by the echo on 9000): 429 past the limit.
      const upgrade = () =>
        new Promise<{ first: string; socket: ReturnType<typeof tlsConnect> }>((resolve, reject) => {
          const host = proxyHost(9000);
          const socket = tlsConnect({ host: '127.0.0.1', port: proxyPort, servername: host, ca }, () => {
            socket.write(
              `GET / HTTP/1.1\r\nHost: ${host}:${proxyPort}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
                `Authorization: ${t.auth().authorization}\r\n\r\n`,
            );
          });
          socket.once('data', (chunk: Buffer) => resolve({ first: chunk.toString('latin1'), socket }));
          socket.on('error', reject);
        });
      const open = [await upgrade(), await upgrade()];
      // The echo sends the forwarded request back: the upgrade reached the container.
      for (const o of open) expect(o.first).toMatch(/^GET \/ HTTP\/1\.1/);
      const refused = await upgrade();
      expect(refused.first).toMatch(/^HTTP\/1\.1 429/);
      expect(refused.first).toContain('RATE_LIMITED');
      refused.socket.destroy();
      open[0]!.socket.destroy();
      await waitFor(
        'a proxy WebSocket slot free',
        async () => t.context.liveSessions.count(t.accountId, 'proxy_websocket') < LIMIT,
      );
      const next = await upgrade();
      expect(next.first).toMatch(/^GET \/ HTTP\/1\.1/);
      next.socket.destroy();
      open[1]!.socket.destroy();
    }, 300_000);
  },
);

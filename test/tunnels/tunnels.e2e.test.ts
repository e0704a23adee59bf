import { randomBytes } from 'node:crypto';
import { connect, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import { AGENT_TUNNEL_PATH, TUNNEL_HEADERS, TUNNEL_UPGRADE } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { ExecSession } from '../../control-plane/src/fleet/tunnels/types.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';
import { readAll, runWorkload, sha256, startWorld, type TunnelWorld, until } from './setup.ts';

/** Runs a command through the exec tunnel and collects everything. */
async function run(world: TunnelWorld, workloadId: string, command: string[]) {
  const session = await world.cp.context.fleet.tunnels.openExec(workloadId, { command, tty: false });
  session.stdin.end();
  const [stdout, stderr, exit] = await Promise.all([
    readAll(session.stdout),
    readAll(session.stderr),
    session.exit,
  ]);
  return { stdout: stdout.toString(), stderr: stderr.toString(), code: exit.code };
}

/** Collects a PTY's output and waits for a pattern in it. */
function terminal(session: ExecSession) {
  let output = '';
  session.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  return {
    get output() {
      return output;
    },
    waitFor: (pattern: RegExp) => until(`terminal output ${pattern}`, () => pattern.exec(output), 15_000),
  };
}

/** Dials the tunnel endpoint as a forger would; resolves with the HTTP status it answered. */
function dialRaw(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url.replace(/^http/, 'ws')}${AGENT_TUNNEL_PATH}`, { headers });
    ws.on('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.on('open', () => {
      ws.terminate();
      reject(new Error('the forged tunnel socket was accepted'));
    });
    ws.on('error', () => {});
  });
}

/**
 * Dials the raw stream upgrade as a forger would, over a bare socket: resolves with the answer's status
 * once the control plane has also closed the connection.
 */
function dialRawUpgrade(url: string, headers: Record<string, string>): Promise<number> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    let answer = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      answer += chunk;
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0)));
    const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
    socket.write(
      `GET ${AGENT_TUNNEL_PATH} HTTP/1.1\r\nHost: cp\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_UPGRADE}\r\n` +
        `${lines.join('')}\r\n`,
    );
  });
}

/** Starts a one-connection nc server inside the container (busybox: `-e` runs the rest of argv). */
async function ncServer(world: TunnelWorld, workloadId: string, port: number, program: string[]) {
  const session = await world.cp.context.fleet.tunnels.openExec(workloadId, {
    command: ['nc', '-l', '-p', String(port), '-e', ...program],
    tty: false,
  });
  await until(`nc listening on ${port}`, async () =>
    (await run(world, workloadId, ['netstat', '-ltn'])).stdout.includes(`:${port}`),
  );
  return session;
}

describe.skipIf(!dockerOrFail('test/tunnels/tunnels.e2e.test.ts'))(
  'reverse tunnels: real agent, real Docker, real control plane',
  () => {
    let docker: Dockerode;
    let world: TunnelWorld;
    let workloadId: string;

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      world = await startWorld(docker);
      // httpd serves /www; the large file is random, and its checksum is taken inside the container.
      const workload = await runWorkload(world, [
        'sh',
        '-c',
        'mkdir -p /www && echo hello tunnel > /www/index.html && ' +
          'dd if=/dev/urandom of=/www/big bs=1048576 count=6 2>/dev/null && ' +
          'httpd -f -p 8080 -h /www & exec sleep 3600',
      ]);
      workloadId = workload.id;
      await until('httpd and the file', async () => {
        const check = await run(world, workloadId, [
          'sh',
          '-c',
          'test -s /www/big && netstat -ltn | grep -q :8080',
        ]);
        return check.code === 0;
      });
      // Under a loaded machine, registration, image and container start take long: bounded, not fixed.
    }, 300_000);

    afterAll(async () => {
      await world?.close();
      if (world) await removeTestContainers(docker, `anvil.host=${world.hostId}`);
    });

    it('streams an HTTP request and a several-MB body to a container port, byte for byte', async () => {
      const stream = await world.cp.context.fleet.tunnels.openStream(workloadId, 8080);
      stream.end('GET /big HTTP/1.0\r\nHost: tunnel\r\n\r\n');
      const response = await readAll(stream);
      const split = response.indexOf('\r\n\r\n');
      const head = response.subarray(0, split).toString();
      const body = response.subarray(split + 4);
      expect(head).toMatch(/^HTTP\/1\.[01] 200/);
      expect(body.length).toBe(6 * 1024 * 1024);
      const inside = await run(world, workloadId, ['sha256sum', '/www/big']);
      expect(inside.stdout.split(/\s+/)[0]).toBe(sha256(body));

      const small = await world.cp.context.fleet.tunnels.openStream(workloadId, 8080);
      small.end('GET /index.html HTTP/1.0\r\n\r\n');
      expect((await readAll(small)).toString()).toContain('hello tunnel');
    });

    it('carries several MB upwards with backpressure, and a half close ends the upload', async () => {
      // nc writes what it receives to a file and exits at EOF; then the container checks the bytes.
      const listener = await world.cp.context.fleet.tunnels.openExec(workloadId, {
        command: ['sh', '-c', 'nc -l -p 9000 > /tmp/upload; echo done'],
        tty: false,
      });
      await until('nc listening', async () =>
        (await run(world, workloadId, ['netstat', '-ltn'])).stdout.includes(':9000'),
      );
      const upload = randomBytes(5 * 1024 * 1024 + 123);
      const stream = await world.cp.context.fleet.tunnels.openStream(workloadId, 9000);
      stream.resume();
      await new Promise<void>((resolve, reject) => {
        stream.on('error', reject);
        stream.end(upload, resolve);
      });
      expect((await readAll(listener.stdout)).toString()).toBe('done\n');
      expect((await listener.exit).code).toBe(0);
      const inside = await run(world, workloadId, ['sha256sum', '/tmp/upload']);
      expect(inside.stdout.split(/\s+/)[0]).toBe(sha256(upload));
    });

    it('destroying the stream closes the tunnel on both sides', async () => {
      const listener = await world.cp.context.fleet.tunnels.openExec(workloadId, {
        command: ['nc', '-l', '-p', '9001'],
        tty: false,
      });
      await until('nc listening', async () =>
        (await run(world, workloadId, ['netstat', '-ltn'])).stdout.includes(':9001'),
      );
      const stream: Duplex = await world.cp.context.fleet.tunnels.openStream(workloadId, 9001);
      stream.write('ping\n');
      await until('bytes through', async () => {
        const chunk = listener.stdout.read() as Buffer | null;
        return chunk?.toString().includes('ping');
      });
      stream.destroy();
      // The agent closed the TCP connection: nc sees EOF and exits.
      expect((await listener.exit).code).toBe(0);
      await until('no tunnel left open', () => world.cp.context.fleet.tunnels.openCount === 0);
    });

    it('a stream tunnel is a raw socket: several MiB echo back byte for byte through the agent', async () => {
      const server = await ncServer(world, workloadId, 9100, ['cat']);
      const stream = await world.cp.context.fleet.tunnels.openStream(workloadId, 9100);
      // No framing on the control plane's side: the agent's upgraded connection is the stream itself.
      expect(stream).toBeInstanceOf(Socket);
      const payload = randomBytes(6 * 1024 * 1024 + 7);
      const echoed = readAll(stream);
      stream.end(payload);
      const back = await echoed;
      expect(back.length).toBe(payload.length);
      expect(sha256(back)).toBe(sha256(payload));
      expect((await server.exit).code).toBe(0);
    });

    it("a half close ends only the caller's direction: the container answers after reading to EOF", async () => {
      const server = await ncServer(world, workloadId, 9101, ['sh', '-c', 'wc -c; echo after-eof']);
      const stream = await world.cp.context.fleet.tunnels.openStream(workloadId, 9101);
      const reply = readAll(stream);
      stream.end(randomBytes(3 * 1024 * 1024));
      expect((await reply).toString().trim().split(/\s+/)).toEqual([String(3 * 1024 * 1024), 'after-eof']);
      expect((await server.exit).code).toBe(0);
    });

    it('bytes the container sends as soon as it is connected, before any request, arrive', async () => {
      const server = await ncServer(world, workloadId, 9102, ['echo', 'early-banner']);
      const stream = await world.cp.context.fleet.tunnels.openStream(workloadId, 9102);
      // The container wrote and closed while the agent was still dialling the tunnel.
      await server.exit;
      expect((await readAll(stream)).toString()).toBe('early-banner\n');
    });

    it('exec without a PTY: stdout, stderr, exit code, env, user and working directory', async () => {
      const result = await run(world, workloadId, ['sh', '-c', 'echo out; echo err >&2; exit 3']);
      expect(result).toEqual({ stdout: 'out\n', stderr: 'err\n', code: 3 });

      const session = await world.cp.context.fleet.tunnels.openExec(workloadId, {
        command: ['sh', '-c', 'echo "$GREETING"; pwd; id -u; cat'],
        tty: false,
        env: { GREETING: 'hi there' },
        user: '1234',
        workingDir: '/tmp',
      });
      session.stdin.end('from stdin\n');
      expect((await readAll(session.stdout)).toString()).toBe('hi there\n/tmp\n1234\nfrom stdin\n');
      expect((await session.exit).code).toBe(0);
    });

    it('exec with a PTY: echoes, resizes, and exits with the code of the shell', async () => {
      const session = await world.cp.context.fleet.tunnels.openExec(workloadId, {
        command: ['sh'],
        tty: true,
        cols: 80,
        rows: 24,
      });
      const tty = terminal(session);
      session.stdin.write('echo mark-$((6*7))\n');
      // The PTY echoes the typed line, and the shell prints the result.
      await tty.waitFor(/echo mark-\$\(\(6\*7\)\)/);
      await tty.waitFor(/mark-42/);
      session.stdin.write('stty size\n');
      await tty.waitFor(/24 80/);
      session.resize(132, 50);
      session.stdin.write('stty size\n');
      await tty.waitFor(/50 132/);
      session.stdin.write('exit 7\n');
      expect((await session.exit).code).toBe(7);
      expect(tty.output).not.toContain('\u0000');
    });

    it('signals reach the exec’d process', async () => {
      const session = await world.cp.context.fleet.tunnels.openExec(workloadId, {
        command: [
          'sh',
          '-c',
          'trap "echo got TERM; exit 42" TERM; echo ready; while true; do sleep 0.1; done',
        ],
        tty: false,
      });
      let out = '';
      session.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      await until('ready', () => out.includes('ready'));
      session.signal('SIGTERM');
      expect((await session.exit).code).toBe(42);
      expect(out).toContain('got TERM');
      expect(() => session.signal('BOGUS')).toThrow(/unsupported signal/);

      // close() tears the session down and the process with it.
      const sleeper = await world.cp.context.fleet.tunnels.openExec(workloadId, {
        command: ['sleep', '1000'],
        tty: false,
      });
      await until('sleeper running', async () =>
        (await run(world, workloadId, ['ps'])).stdout.includes('sleep 1000'),
      );
      sleeper.close();
      await until(
        'sleeper killed',
        async () => !(await run(world, workloadId, ['ps'])).stdout.includes('sleep 1000'),
      );
    });

    it('a refused port, an unknown workload and a missing command fail with the right codes', async () => {
      const refused = world.cp.context.fleet.tunnels.openStream(workloadId, 9999);
      await expect(refused).rejects.toBeInstanceOf(ApiError);
      await expect(refused).rejects.toMatchObject({ code: 'AGENT_COMMAND_FAILED' });
      await expect(refused).rejects.toThrow(/ECONNREFUSED/);
      await expect(world.cp.context.fleet.tunnels.openStream('wl_nosuchthing', 80)).rejects.toMatchObject({
        code: 'WORKLOAD_NOT_FOUND',
      });
      await expect(
        world.cp.context.fleet.tunnels
          .openExec(workloadId, { command: ['/no/such/binary'], tty: false })
          .then(async (session) => (await session.exit).code),
      ).resolves.toSatisfy((code: number) => code === 126 || code === 127);
    });

    it('never opens a tunnel to a container without our managed label, even one naming the workload', async () => {
      // A stopped workload has no container; a look-alike carries its workload and host labels but not
      // anvil.managed=true, and serves the port the caller asks for.
      const workload = await world.cp.context.fleet.workloads.create({
        hostId: world.hostId,
        kind: 'cluster',
        ownerAccountId: world.cp.accountId,
        desired: 'stopped',
        spec: (await world.cp.context.fleet.workloads.get(workloadId)).spec,
      });
      const impostor = await docker.createContainer({
        Image: 'anvil-test/busybox:latest',
        Cmd: [
          'sh',
          '-c',
          'mkdir -p /www && echo impostor > /www/index.html && exec httpd -f -p 8080 -h /www',
        ],
        Labels: { 'anvil.test': '1', 'anvil.workload': workload.id, 'anvil.host': world.hostId },
      });
      try {
        await impostor.start();
        const attempt = world.cp.context.fleet.tunnels.openStream(workload.id, 8080);
        await expect(attempt).rejects.toMatchObject({ code: 'AGENT_COMMAND_FAILED' });
        await expect(attempt).rejects.toThrow(/no running container/);
      } finally {
        await impostor.remove({ force: true });
      }
    });

    it('refuses forged, incomplete and replayed tunnel sockets cleanly, and keeps working', async () => {
      const base = {
        authorization: `Bearer ${world.credential}`,
        [TUNNEL_HEADERS.hostId]: world.hostId,
        [TUNNEL_HEADERS.tunnelId]: randomBytes(16).toString('base64url'),
        [TUNNEL_HEADERS.token]: randomBytes(32).toString('base64url'),
      };
      expect(await dialRaw(world.url, base)).toBe(401);
      expect(await dialRaw(world.url, { ...base, authorization: 'Bearer not-the-credential' })).toBe(401);
      expect(await dialRaw(world.url, { [TUNNEL_HEADERS.hostId]: world.hostId })).toBe(400);
      expect(await dialRaw(world.url, {})).toBe(400);
      // The raw stream upgrade: refused the same way, and the connection closed.
      expect(await dialRawUpgrade(world.url, base)).toBe(401);
      expect(await dialRawUpgrade(world.url, { ...base, authorization: 'Bearer not-the-credential' })).toBe(
        401,
      );
      expect(await dialRawUpgrade(world.url, {})).toBe(400);
      // The agent's connection and the tunnels are unaffected.
      expect(world.cp.context.fleet.agents.isConnectedHere(world.hostId)).toBe(true);
      const stream = await world.cp.context.fleet.tunnels.openStream(workloadId, 8080);
      stream.end('GET /index.html HTTP/1.0\r\n\r\n');
      expect((await readAll(stream)).toString()).toContain('hello tunnel');
    });

    it('a host whose agent is gone answers HOST_NOT_CONNECTED', async () => {
      await world.agent.stop();
      await until('agent disconnected', () => !world.cp.context.fleet.agents.isConnectedHere(world.hostId));
      await expect(world.cp.context.fleet.tunnels.openStream(workloadId, 8080)).rejects.toMatchObject({
        code: 'HOST_NOT_CONNECTED',
      });
    });
  },
);

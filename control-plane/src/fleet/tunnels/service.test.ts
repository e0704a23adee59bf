import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, Socket } from 'node:net';
import { ApiError } from '@anvil/shared';
import {
  AGENT_TUNNEL_PATH,
  type CommandBody,
  decodeFrame,
  encodeExit,
  encodeFrame,
  MAX_TUNNEL_CHUNK,
  TUNNEL_CHANNEL,
  TUNNEL_HEADERS,
  TUNNEL_UPGRADE,
} from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { capturedLogger } from '../../testing/captured-logs.ts';
import { createTestApp, type TestApp, waitFor } from '../../testing/index.ts';
import { workloadSpecInput } from '../../testing/workload-spec.ts';
import { TunnelService } from './service.ts';

type OpenTunnel = Extract<CommandBody, { name: 'open_tunnel' }>;

/**
 * The endpoint's checks against the real host credentials (PGlite) and a real HTTP server; the agent's
 * side is played by this test (a scripted agent, a test double): each test says how it answers
 * `open_tunnel`. The end-to-end test with the real agent is test/tunnels/tunnels.e2e.test.ts.
 */
describe('TunnelService: tickets, the tunnel endpoint and its refusals', () => {
  let cp: TestApp;
  let server: Server;
  let url: string;
  let host: { hostId: string; credential: string };
  let other: { hostId: string; credential: string };
  let workloadId: string;
  let scriptedAgent: (command: OpenTunnel) => Promise<unknown>;
  let service: TunnelService;
  /** The service's warnings: each refusal is logged just before its answer is written. */
  const warnings = capturedLogger('warn');
  const refusals = () => warnings.lines.filter((line) => line['msg'] === 'tunnel socket refused').length;

  function dial(command: OpenTunnel, who = host, token = command.token): Promise<WebSocket | number> {
    return new Promise((resolve) => {
      const ws = new WebSocket(`${url}${AGENT_TUNNEL_PATH}`, {
        headers: {
          authorization: `Bearer ${who.credential}`,
          [TUNNEL_HEADERS.hostId]: who.hostId,
          [TUNNEL_HEADERS.tunnelId]: command.tunnelId,
          [TUNNEL_HEADERS.token]: token,
        },
      });
      ws.on('unexpected-response', (_req, res) => {
        resolve(res.statusCode ?? 0);
        ws.terminate();
      });
      ws.on('error', () => {});
      ws.on('open', () => resolve(ws));
    });
  }

  /**
   * Dials the raw stream upgrade as the agent does, over a bare socket: resolves with the answer's status,
   * the socket (the tunnel after a 101), what followed the head, and whether the server closed it.
   */
  function dialRaw(
    command: Pick<OpenTunnel, 'tunnelId' | 'token'>,
    who = host,
    token = command.token,
    upgrade: string = TUNNEL_UPGRADE,
  ): Promise<{ status: number; socket: Socket; rest: Buffer; closed: Promise<void> }> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port });
      const closed = new Promise<void>((done) => socket.once('close', () => done()));
      socket.on('error', reject);
      socket.write(
        `GET ${AGENT_TUNNEL_PATH} HTTP/1.1\r\nHost: cp\r\nConnection: Upgrade\r\nUpgrade: ${upgrade}\r\n` +
          `Authorization: Bearer ${who.credential}\r\n${TUNNEL_HEADERS.hostId}: ${who.hostId}\r\n` +
          `${TUNNEL_HEADERS.tunnelId}: ${command.tunnelId}\r\n${TUNNEL_HEADERS.token}: ${token}\r\n\r\n`,
      );
      let buffered = Buffer.alloc(0);
      const onData = (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        const end = buffered.indexOf('\r\n\r\n');
        if (end < 0) return;
        socket.off('data', onData);
        socket.pause();
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(buffered.toString('latin1'))?.[1] ?? 0);
        resolve({ status, socket, rest: buffered.subarray(end + 4), closed });
      };
      socket.on('data', onData);
    });
  }

  async function registerHost(): Promise<{ hostId: string; credential: string }> {
    const { value } = await cp.context.fleet.joinTokens.create({ userId: cp.userId, keyId: null }, {});
    const result = await cp.context.fleet.hosts.register({
      joinToken: value,
      hostname: 'h',
      agentVersion: 't',
    });
    if (!result.ok) throw new Error(result.reason);
    return { hostId: result.hostId, credential: result.credential };
  }

  beforeAll(async () => {
    cp = await createTestApp();
    host = await registerHost();
    other = await registerHost();
    const workload = await cp.context.fleet.workloads.create({
      hostId: host.hostId,
      kind: 'cluster',
      ownerAccountId: cp.accountId,
      spec: workloadSpecInput({
        image: 'x',
        command: null,
        labels: {},
      }),
    });
    workloadId = workload.id;
    service = new TunnelService({
      agents: {
        sendCommand: async (_hostId, command) => scriptedAgent(command as OpenTunnel),
      },
      workloads: cp.context.fleet.workloads,
      hosts: cp.context.fleet.hosts,
      openTimeoutMs: 300,
      logger: warnings.logger,
    });
    server = createServer((_req, res) => res.end());
    server.on('upgrade', (req, socket, head) => service.handleUpgrade(req, socket, head));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    service.closeAll();
    await new Promise((resolve) => server.close(resolve));
    await cp.close();
  });

  it('an agent without the raw upgrade dials a WebSocket for a stream: framed bytes both ways, half close, normal end', async () => {
    let agentSide!: WebSocket;
    const received: Buffer[] = [];
    scriptedAgent = async (command) => {
      expect(command).toMatchObject({
        name: 'open_tunnel',
        workloadId,
        target: { kind: 'stream', port: 8080 },
      });
      // A forged token first: refused, and the ticket survives it for the real one.
      expect(await dial(command, host, 'A'.repeat(43))).toBe(401);
      expect(await dial(command, other)).toBe(401);
      const ws = await dial(command);
      if (typeof ws === 'number') throw new Error(`refused: ${ws}`);
      agentSide = ws;
      ws.on('message', (data) => received.push(data as Buffer));
      return { tunnelId: command.tunnelId };
    };
    const stream = await service.openStream(workloadId, 8080);
    stream.write('hello');
    stream.end();
    await expect.poll(() => received.length).toBe(2);
    expect(decodeFrame(received[0]!)).toEqual({
      channel: TUNNEL_CHANNEL.stdin,
      payload: Buffer.from('hello'),
    });
    expect(decodeFrame(received[1]!)?.channel).toBe(TUNNEL_CHANNEL.eof);
    agentSide.send(encodeFrame(TUNNEL_CHANNEL.stdout, Buffer.from('world')));
    agentSide.send(encodeFrame(TUNNEL_CHANNEL.eof));
    agentSide.close(1000);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('world');
  });

  it('a raw upgrade: the stream is the socket itself, bytes pass unframed both ways, half close holds', async () => {
    let agentSide!: Socket;
    scriptedAgent = async (command) => {
      expect(command.target).toEqual({ kind: 'stream', port: 8080, upgrade: TUNNEL_UPGRADE });
      const dialled = await dialRaw(command);
      expect(dialled.status).toBe(101);
      agentSide = dialled.socket;
      agentSide.allowHalfOpen = true;
      return { tunnelId: command.tunnelId };
    };
    const stream = await service.openStream(workloadId, 8080);
    expect(stream).toBeInstanceOf(Socket);
    expect(service.openCount).toBe(1);
    // What the caller writes reaches the agent as it is, no channel byte; its FIN arrives as a FIN.
    const upload = Buffer.alloc(2 * 1024 * 1024 + 3, 0x5a);
    stream.end(upload);
    const atAgent: Buffer[] = [];
    agentSide.on('data', (chunk: Buffer) => atAgent.push(chunk));
    agentSide.resume();
    await new Promise((resolve) => agentSide.once('end', resolve));
    expect(Buffer.concat(atAgent).equals(upload)).toBe(true);
    // The other direction is still open after the caller's half close.
    agentSide.end('the reply');
    const reply: Buffer[] = [];
    for await (const chunk of stream) reply.push(chunk as Buffer);
    expect(Buffer.concat(reply).toString()).toBe('the reply');
    await expect.poll(() => service.openCount).toBe(0);
  });

  it('refuses a raw upgrade with a wrong or reused token, or for an exec tunnel, and closes the connection', async () => {
    let used!: OpenTunnel;
    scriptedAgent = async (command) => {
      used = command;
      const forged = await dialRaw(command, host, 'A'.repeat(43));
      expect(forged.status).toBe(401);
      expect(forged.rest.toString()).toBe('unknown, expired or already used tunnel token\n');
      await forged.closed;
      const real = await dialRaw(command);
      expect(real.status).toBe(101);
      return {};
    };
    const stream = await service.openStream(workloadId, 80);
    const replay = await dialRaw(used);
    expect(replay.status).toBe(401);
    await replay.closed;
    stream.destroy();

    const unknownUpgrade = await dialRaw(used, host, used.token, 'teapot/1');
    expect(unknownUpgrade.status).toBe(400);
    await unknownUpgrade.closed;

    let execTicket!: OpenTunnel;
    scriptedAgent = async (command) => {
      execTicket = command;
      const raw = await dialRaw(command);
      expect(raw.status).toBe(400);
      await raw.closed;
      // The refusal left the ticket for a WebSocket.
      const ws = await dial(command);
      if (typeof ws === 'number') throw new Error(`refused: ${ws}`);
      return {};
    };
    const session = await service.openExec(workloadId, { command: ['true'], tty: false });
    expect(execTicket.target.kind).toBe('exec');
    session.close();
  });

  it('survives an agent resetting its socket while it is checked and refused', async () => {
    // Without an error listener from the upgrade on, the refusal's write to the reset socket would be an
    // uncaught 'error' (EPIPE / ECONNRESET) ending the whole control plane.
    const errors: Error[] = [];
    const refusedBefore = refusals();
    const socket = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port });
    socket.on('error', (error) => errors.push(error));
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(
      `GET ${AGENT_TUNNEL_PATH} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
        'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n' +
        `Authorization: Bearer ${host.credential}\r\n${TUNNEL_HEADERS.hostId}: ${host.hostId}\r\n` +
        `${TUNNEL_HEADERS.tunnelId}: forged\r\n${TUNNEL_HEADERS.token}: ${'A'.repeat(43)}\r\n\r\n`,
    );
    socket.resetAndDestroy();
    // The refusal is written after the credential check: once it is logged, it has met the reset connection.
    await waitFor('the forged ticket refused', () => refusals() > refusedBefore, 10_000, 10);
    const ws = await new Promise<number>((resolve) => {
      const probe = new WebSocket(`${url}${AGENT_TUNNEL_PATH}`);
      probe.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      probe.on('error', () => resolve(-1));
    });
    expect(ws).toBe(400);
  });

  it('a used ticket cannot be replayed', async () => {
    let used!: OpenTunnel;
    scriptedAgent = async (command) => {
      used = command;
      const ws = await dial(command);
      if (typeof ws === 'number') throw new Error(`refused: ${ws}`);
      return {};
    };
    const stream = await service.openStream(workloadId, 80);
    expect(await dial(used)).toBe(401);
    stream.destroy();
  });

  it('an agent that replies but never dials times out with AGENT_TIMEOUT', async () => {
    scriptedAgent = async () => ({});
    const attempt = service.openStream(workloadId, 80);
    await expect(attempt).rejects.toBeInstanceOf(ApiError);
    await expect(attempt).rejects.toMatchObject({ code: 'AGENT_TIMEOUT' });
  });

  it('an abort settles the wait at once', async () => {
    scriptedAgent = () => new Promise(() => {});
    const controller = new AbortController();
    const attempt = service.openStream(workloadId, 80, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('caller went away')), 20);
    await expect(attempt).rejects.toThrow('caller went away');
  });

  it("the agent's failure is the caller's, and its ticket is gone", async () => {
    let failed!: OpenTunnel;
    scriptedAgent = async (command) => {
      failed = command;
      throw new ApiError('AGENT_COMMAND_FAILED', 'connect ECONNREFUSED 172.17.0.2:80');
    };
    await expect(service.openStream(workloadId, 80)).rejects.toMatchObject({ code: 'AGENT_COMMAND_FAILED' });
    expect(await dial(failed)).toBe(401);
  });

  it('an error frame from the agent fails the stream with its reason', async () => {
    scriptedAgent = async (command) => {
      const ws = await dial(command);
      if (typeof ws === 'number') throw new Error(`refused: ${ws}`);
      setTimeout(() => {
        ws.send(encodeFrame(TUNNEL_CHANNEL.error, Buffer.from('connection to the container: ECONNRESET')));
        ws.close(1011);
      }, 10);
      return {};
    };
    const stream = await service.openStream(workloadId, 80);
    await expect(
      new Promise((_resolve, reject) => {
        stream.on('error', reject);
        stream.resume();
      }),
    ).rejects.toThrow('tunnel: connection to the container: ECONNRESET');
  });

  it('an exec session: stdout, stderr, resize and signal frames, exit code', async () => {
    let agentSide!: WebSocket;
    const received: Buffer[] = [];
    scriptedAgent = async (command) => {
      expect(command.target).toEqual({
        kind: 'exec',
        command: ['sh'],
        tty: true,
        env: { A: '1' },
        cols: 80,
        rows: 24,
        user: null,
        workingDir: null,
      });
      const ws = await dial(command);
      if (typeof ws === 'number') throw new Error(`refused: ${ws}`);
      agentSide = ws;
      ws.on('message', (data) => received.push(data as Buffer));
      return {};
    };
    const session = await service.openExec(workloadId, {
      command: ['sh'],
      tty: true,
      env: { A: '1' },
      cols: 80,
      rows: 24,
    });
    session.resize(100, 30);
    session.signal('SIGINT');
    expect(() => session.signal('NOPE')).toThrow(TypeError);
    await expect.poll(() => received.length).toBe(2);
    expect(decodeFrame(received[0]!)?.channel).toBe(TUNNEL_CHANNEL.resize);
    expect(decodeFrame(received[1]!)).toEqual({
      channel: TUNNEL_CHANNEL.signal,
      payload: Buffer.from('INT'),
    });
    agentSide.send(encodeFrame(TUNNEL_CHANNEL.stdout, Buffer.from('out')));
    agentSide.send(encodeFrame(TUNNEL_CHANNEL.stderr, Buffer.from('err')));
    agentSide.send(encodeFrame(TUNNEL_CHANNEL.eof));
    agentSide.send(encodeExit(130));
    agentSide.close(1000);
    const text = async (readable: NodeJS.ReadableStream) => {
      let out = '';
      for await (const chunk of readable) out += chunk.toString();
      return out;
    };
    expect(await text(session.stdout)).toBe('out');
    expect(await text(session.stderr)).toBe('err');
    expect(await session.exit).toEqual({ code: 130 });
  });

  it('exec stdin: writes corked together cross as one frame (one copy), larger ones split at the frame limit', async () => {
    const received: Buffer[] = [];
    let agentSide!: WebSocket;
    scriptedAgent = async (command) => {
      const ws = await dial(command);
      if (typeof ws === 'number') throw new Error(`refused: ${ws}`);
      agentSide = ws;
      ws.on('message', (data) => received.push(data as Buffer));
      return {};
    };
    const session = await service.openExec(workloadId, { command: ['cat'], tty: false });
    const parts = [Buffer.from('one '), Buffer.from('two '), Buffer.from('three')];
    session.stdin.cork();
    for (const part of parts) session.stdin.write(part);
    session.stdin.uncork();
    const big = Buffer.alloc(MAX_TUNNEL_CHUNK + 10, 9);
    session.stdin.cork();
    session.stdin.write(big.subarray(0, 100));
    session.stdin.write(big.subarray(100));
    session.stdin.uncork();
    await expect.poll(() => received.length).toBe(3);
    const frames = received.map((frame) => decodeFrame(frame)!);
    expect(frames.map((f) => f.channel)).toEqual([
      TUNNEL_CHANNEL.stdin,
      TUNNEL_CHANNEL.stdin,
      TUNNEL_CHANNEL.stdin,
    ]);
    expect(frames[0]!.payload.toString()).toBe('one two three');
    expect(frames.map((f) => f.payload.length)).toEqual([13, MAX_TUNNEL_CHUNK, 10]);
    expect(Buffer.concat([frames[1]!.payload, frames[2]!.payload]).equals(big)).toBe(true);
    session.close();
    agentSide.terminate();
    await session.exit;
  });

  it('without a connected agent: HOST_NOT_CONNECTED from the real gateway; unknown workload: WORKLOAD_NOT_FOUND', async () => {
    await expect(cp.context.fleet.tunnels.openStream(workloadId, 80)).rejects.toMatchObject({
      code: 'HOST_NOT_CONNECTED',
    });
    await expect(cp.context.fleet.tunnels.openStream('wl_missing', 80)).rejects.toMatchObject({
      code: 'WORKLOAD_NOT_FOUND',
    });
    await expect(cp.context.fleet.tunnels.openStream(workloadId, 0)).rejects.toMatchObject({
      code: 'VALIDATION_ERROR',
    });
    await expect(
      cp.context.fleet.tunnels.openExec(workloadId, { command: [], tty: false }),
    ).rejects.toMatchObject({
      code: 'VALIDATION_ERROR',
      details: { field: 'command' },
    });
    await expect(
      cp.context.fleet.tunnels.openExec(workloadId, {
        command: ['sh'],
        tty: false,
        env: { 'BAD=NAME': 'x' },
      }),
    ).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
  });
});

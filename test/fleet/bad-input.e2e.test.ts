import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AGENT_CONNECT_PATH, CLOSE_CODES, createMessage, MAX_FRAME_BYTES } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { WebSocket } from 'ws';
import { sampleInventory } from '../agent/fixtures.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { type AgentProcess, spawnAgent } from './agent-process.ts';
import { FleetControlPlane } from './control-plane.ts';
import { waitFor } from './wait.ts';

interface Peer {
  ws: WebSocket;
  received: Record<string, unknown>[];
  closed: Promise<{ code: number; reason: string }>;
  send(data: string | Buffer | object, binary?: boolean): void;
  next(type: string): Promise<Record<string, unknown>>;
}

/** A hand-driven agent socket: sends whatever a test gives it and records what comes back. */
async function peer(url: string): Promise<Peer> {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}${AGENT_CONNECT_PATH}`);
  const received: Record<string, unknown>[] = [];
  ws.on('message', (data) => received.push(JSON.parse(data.toString()) as Record<string, unknown>));
  ws.on('error', () => {});
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return {
    ws,
    received,
    closed,
    send(data, binary = false) {
      const payload = typeof data === 'string' || Buffer.isBuffer(data) ? data : JSON.stringify(data);
      ws.send(payload, { binary });
    },
    next: (type) => waitFor(`a ${type} message`, () => received.find((m) => m['type'] === type)),
  };
}

// Real processes on a shared 2-core machine: minutes, not the default 60 s, before a wait is a failure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 400_000 });
/**
 * Issue 3's bad-input proof on the real gateway: each bad frame or claim is refused cleanly and the
 * legitimate agent (a real agent process) keeps its connection.
 */
describe.skipIf(!dockerOrFail('fleet bad-input tests'))('bad input on the real agent gateway', () => {
  let cp: FleetControlPlane;
  let agent: AgentProcess;
  let hostId: string;
  let credential: string;

  beforeAll(async () => {
    cp = await FleetControlPlane.start();
    agent = await spawnAgent({ controlPlaneUrl: cp.url, joinToken: await cp.joinToken() });
    hostId = await agent.hostId();
    await cp.readyHost(hostId, undefined, agent);
    credential = (
      JSON.parse(await readFile(join(agent.stateDir, 'credential.json'), 'utf8')) as { credential: string }
    ).credential;
  }, 400_000);

  afterAll(async () => {
    await agent?.kill('SIGKILL');
    await cp?.close();
  });

  async function currentConnection(): Promise<string | null> {
    const row = await cp.context.db.prisma.host.findUniqueOrThrow({ where: { id: hostId } });
    return row.connectionId;
  }

  /** Waits until the legitimate agent is connected here (it may be redialling on a loaded machine). */
  async function steady(): Promise<string> {
    return waitFor(
      'the legitimate agent connected',
      async () => (cp.context.fleet.agents.isConnectedHere(hostId) ? await currentConnection() : null),
      120_000,
    );
  }

  /** The legitimate agent still holds the connection it had before the bad input, and answers. */
  async function legitimateUnaffected(before: string): Promise<void> {
    expect(await currentConnection()).toBe(before);
    expect(cp.context.fleet.agents.isConnectedHere(hostId)).toBe(true);
    expect(await cp.context.fleet.agents.sendCommand(hostId, { name: 'ping' }, 10_000)).toBeDefined();
    expect(agent.child.exitCode).toBeNull();
  }

  function hello(hostIdClaimed: string, secret: string) {
    return createMessage('hello', {
      agentVersion: 'bad-input-test',
      hostId: hostIdClaimed,
      credential: secret,
      inventory: sampleInventory(),
    });
  }

  it('refuses garbage, binary and unknown frames before hello', async () => {
    const before = await steady();
    for (const [frame, binary] of [
      ['this is not json', false],
      ['{"v":1,"type":"format_disk","id":"x1"}', false],
      ['{"v":1,"type":"actual_state","id":"x2","generation":1,"workloads":[]}', false],
      [Buffer.from([0, 1, 2, 3]), true],
    ] as const) {
      const p = await peer(cp.url);
      p.send(frame, binary);
      const refusal = await p.next('refusal');
      expect(refusal).toMatchObject({ code: 'bad_message', retryable: true });
      expect((await p.closed).code).toBe(CLOSE_CODES.badFrame);
    }
    await legitimateUnaffected(before);
  });

  it('closes a connection that sends an oversize frame', async () => {
    const before = await steady();
    const p = await peer(cp.url);
    p.send('x'.repeat(MAX_FRAME_BYTES + 1));
    expect((await p.closed).code).toBe(1009);
    await legitimateUnaffected(before);
  });

  it('refuses forged and replayed credentials and a used join token', async () => {
    const before = await steady();
    const forged = await peer(cp.url);
    forged.send(hello(hostId, `anvhc_${'A'.repeat(43)}`));
    expect(await forged.next('refusal')).toMatchObject({ code: 'credential_invalid', retryable: false });
    expect((await forged.closed).code).toBe(CLOSE_CODES.refusedFatal);

    // The real credential claimed for a host it does not belong to.
    const misplaced = await peer(cp.url);
    misplaced.send(hello('host_someoneelse00000000', credential));
    expect(await misplaced.next('refusal')).toMatchObject({ code: 'credential_invalid' });
    await misplaced.closed;

    const token = await cp.joinToken();
    const first = await peer(cp.url);
    first.send(createMessage('register', { joinToken: token, hostname: 'one', agentVersion: 'x' }));
    expect(await first.next('registered')).toMatchObject({ hostId: expect.any(String) });
    first.ws.close();
    const replay = await peer(cp.url);
    replay.send(createMessage('register', { joinToken: token, hostname: 'two', agentVersion: 'x' }));
    expect(await replay.next('refusal')).toMatchObject({ code: 'join_token_invalid', retryable: false });
    expect((await replay.closed).code).toBe(CLOSE_CODES.refusedFatal);
    await legitimateUnaffected(before);
  });

  it('refuses a second agent claiming the same host while the first one answers', async () => {
    const before = await steady();
    const second = await peer(cp.url);
    second.send(hello(hostId, credential));
    const refusal = await second.next('refusal');
    expect(refusal).toMatchObject({ code: 'host_already_connected', retryable: true });
    expect((await second.closed).code).toBe(CLOSE_CODES.refusedRetry);
    await legitimateUnaffected(before);
  });

  it('keeps a welcomed agent over garbage and unknown frames, and closes it on an oversize one', async () => {
    const before = await steady();
    // A second host, driven by hand, so its own connection can misbehave after welcome.
    const token = await cp.joinToken();
    const p = await peer(cp.url);
    p.send(createMessage('register', { joinToken: token, hostname: 'manual', agentVersion: 'x' }));
    const registered = await p.next('registered');
    p.send(hello(registered['hostId'] as string, registered['credential'] as string));
    await p.next('welcome');
    p.send('garbage after welcome');
    p.send('{"v":1,"type":"self_destruct","id":"z"}');
    p.send(createMessage('heartbeat', { seq: 1, sentAt: Date.now(), uptimeSeconds: 1 }));
    expect(await p.next('heartbeat_ack')).toMatchObject({ seq: 1 });
    expect(cp.context.fleet.agents.isConnectedHere(registered['hostId'] as string)).toBe(true);
    p.send('y'.repeat(MAX_FRAME_BYTES + 10));
    expect((await p.closed).code).toBe(1009);
    await waitFor(
      'the manual host disconnected',
      () => !cp.context.fleet.agents.isConnectedHere(registered['hostId'] as string),
    );
    await legitimateUnaffected(before);
    const { body } = await cp.context.fleet.metrics.render();
    expect(body).toMatch(/anvil_agent_bad_frames_total\{code="too_large"\} 2/);
    expect(body).toMatch(/anvil_agent_refusals_total\{code="host_already_connected"\} 1/);
  });
});

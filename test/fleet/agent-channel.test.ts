import { newId } from '@anvil/shared';
import { AGENT_CONNECT_PATH, CLOSE_CODES, createMessage } from '@anvil/shared/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WebSocket } from 'ws';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { workloadSpecInput } from '../../control-plane/src/testing/workload-spec.ts';
import { sampleInventory } from '../agent/fixtures.ts';

/**
 * The agent channel's security over the real gateway and the real WebSocket protocol, with hand-driven
 * agents: what a host credential may write, and what unauthenticated sockets may hold.
 */

interface Peer {
  ws: WebSocket;
  received: Record<string, unknown>[];
  closed: Promise<{ code: number; reason: string }>;
  send(message: object): void;
  next(type: string): Promise<Record<string, unknown>>;
}

function open(url: string): Promise<Peer> {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}${AGENT_CONNECT_PATH}`);
  const received: Record<string, unknown>[] = [];
  ws.on('message', (data) => received.push(JSON.parse(data.toString()) as Record<string, unknown>));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  return new Promise((resolve, reject) => {
    ws.once('open', () =>
      resolve({
        ws,
        received,
        closed,
        send: (message) => ws.send(JSON.stringify(message)),
        next: (type) => waitFor(`a ${type} message`, async () => received.find((m) => m['type'] === type)),
      }),
    );
    ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

// The first test app of a process boots PGlite and compiles the schema: on a shared machine, minutes.
vi.setConfig({ testTimeout: 240_000 });

const apps: TestApp[] = [];
const peers: Peer[] = [];
afterEach(async () => {
  for (const p of peers.splice(0)) p.ws.terminate();
  for (const t of apps.splice(0)) await t.close();
});

async function start(env: Record<string, string> = {}): Promise<{ t: TestApp; url: string }> {
  const t = await createTestApp({ env });
  apps.push(t);
  return { t, url: await t.app.listen({ host: '127.0.0.1', port: 0 }) };
}

async function peer(url: string): Promise<Peer> {
  const p = await open(url);
  peers.push(p);
  return p;
}

/** Registers a host with a fresh join token and says hello on the same socket, as an agent does. */
async function agentOf(t: TestApp, url: string): Promise<{ peer: Peer; hostId: string; credential: string }> {
  const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
  const p = await peer(url);
  p.send(
    createMessage('register', {
      joinToken: value,
      hostname: `h-${newId('wl').slice(-8)}`,
      agentVersion: 'test',
    }),
  );
  const registered = (await p.next('registered')) as { hostId: string; credential: string };
  p.send(
    createMessage('hello', {
      agentVersion: 'test',
      hostId: registered.hostId,
      credential: registered.credential,
      inventory: sampleInventory(),
    }),
  );
  await p.next('welcome');
  return { peer: p, hostId: registered.hostId, credential: registered.credential };
}

const line = (workloadId: string, text: string) => ({
  workloadId,
  containerId: `c-${workloadId}`,
  stream: 'stdout' as const,
  ts: '2026-11-27T04:00:00.000000000Z',
  line: text,
});

describe('host credentials write only their own workloads', () => {
  it.each([
    ['log_batch', 'its own workload', 'own', true],
    ['log_batch', "another host's workload", 'foreign', false],
    ['log_batch', 'a workload that does not exist', 'none', false],
    ['logs_dropped', 'its own workload', 'own', true],
    ['logs_dropped', "another host's workload", 'foreign', false],
    ['metric_batch', 'its own workload', 'own', true],
    ['metric_batch', "another host's workload", 'foreign', false],
  ])('%s about %s: stored %s', async (type, _what, target, stored) => {
    const { t, url } = await start();
    const a = await agentOf(t, url);
    const b = await agentOf(t, url);
    const own = newId('wl');
    const foreign = newId('wl');
    await t.context.fleet.workloads.create({
      id: own,
      hostId: b.hostId,
      kind: 'cluster',
      ownerAccountId: t.accountId,
      spec: workloadSpecInput(),
    });
    await t.context.fleet.workloads.create({
      id: foreign,
      hostId: a.hostId,
      kind: 'cluster',
      ownerAccountId: t.accountId,
      spec: workloadSpecInput(),
    });
    // Host b knows its placement once its desired set arrived.
    await waitFor('b has its desired set', async () =>
      b.peer.received.some(
        (m) => m['type'] === 'desired_state' && JSON.stringify(m['workloads']).includes(own),
      ),
    );
    const id = target === 'own' ? own : target === 'foreign' ? foreign : newId('wl');
    // The marker goes with every message: its arrival tells the message was handled.
    const marker = newId('wl');
    if (type === 'log_batch') {
      b.peer.send(
        createMessage('log_batch', { entries: [line(id, 'written by host b'), line(own, marker)] }),
      );
    } else if (type === 'logs_dropped') {
      const loss = { containerId: null, lines: 3, bytes: 30, firstTs: null, lastTs: null };
      b.peer.send(createMessage('logs_dropped', { losses: [{ ...loss, workloadId: id }] }));
      b.peer.send(createMessage('log_batch', { entries: [line(own, marker)] }));
    } else {
      const container = {
        containerId: 'c',
        cpuPercent: 1,
        cpuTotalNs: 1,
        memoryUsedBytes: 1,
        memoryLimitBytes: 1,
        networkRxBytes: 1,
        networkTxBytes: 1,
        blockReadBytes: 1,
        blockWriteBytes: 1,
      };
      b.peer.send(
        createMessage('metric_batch', {
          samples: [{ at: Date.now(), host: null, gpus: [], containers: [{ ...container, workloadId: id }] }],
          dropped: 0,
        }),
      );
      b.peer.send(createMessage('log_batch', { entries: [line(own, marker)] }));
    }
    await waitFor('the marker line stored', async () => {
      await t.context.fleet.telemetry.flush();
      const lines = await t.context.fleet.telemetry.queryLogs({ workloadId: own });
      return lines.some((l) => l.line === marker);
    });
    await t.context.fleet.telemetry.flush();
    let found: boolean;
    if (type === 'log_batch') {
      const lines = await t.context.fleet.telemetry.queryLogs({ workloadId: id });
      found = lines.some((l) => l.line === 'written by host b');
    } else if (type === 'logs_dropped') {
      found = (await t.context.fleet.telemetry.logLosses(id)).length > 0;
    } else {
      const rows = await t.context.db.sql.query<{ n: string | number }>(
        `SELECT count(*) AS n FROM metric_samples WHERE kind = 'container' AND series = $1`,
        [id],
      );
      found = Number(rows[0]?.n) > 0;
    }
    expect(found).toBe(stored);
    // The refusal is per item: host b's connection stays.
    expect(t.context.fleet.agents.isConnectedHere(b.hostId)).toBe(true);
  });
});

describe('unauthenticated agent sockets', () => {
  it('are capped: past ANVIL_AGENT_PREAUTH_LIMIT the upgrade answers 503, welcomed agents do not count', async () => {
    const { t, url } = await start({ ANVIL_AGENT_PREAUTH_LIMIT: '3' });
    // A welcomed agent holds no pre-authentication slot.
    await agentOf(t, url);
    const idle = [await peer(url), await peer(url), await peer(url)];
    const steps: Array<[string, () => Promise<unknown>, string]> = [
      ['a fourth idle socket', () => peer(url), 'HTTP 503'],
      ['one more after another retry', () => peer(url), 'HTTP 503'],
    ];
    for (const [what, attempt, error] of steps) await expect(attempt(), what).rejects.toThrow(error);
    // A slot frees when an idle socket goes; the newcomer gets it, and can still register.
    idle[0]!.ws.terminate();
    await idle[0]!.closed;
    await waitFor('a slot is free again', async () => {
      try {
        peers.push(await open(url));
        return true;
      } catch {
        return false;
      }
    });
    await expect(peer(url)).rejects.toThrow('HTTP 503');
  });

  it('are closed when no hello comes within ANVIL_AGENT_HANDSHAKE_SECONDS', async () => {
    const { url } = await start({ ANVIL_AGENT_HANDSHAKE_SECONDS: '1' });
    // Twice: the deadline holds for every socket, not only the first.
    for (const attempt of [1, 2]) {
      const p = await peer(url);
      const refusal = await p.next('refusal');
      expect(refusal, `attempt ${attempt}`).toMatchObject({
        code: 'handshake_timeout',
        retryable: true,
        reason: 'no hello within 1000 ms',
      });
      expect((await p.closed).code).toBe(CLOSE_CODES.refusedRetry);
    }
  });
});

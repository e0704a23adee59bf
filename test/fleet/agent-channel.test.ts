import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newId } from '@anvil/shared';
import { AGENT_CONNECT_PATH, CLOSE_CODES, createMessage, PROTOCOL_VERSION } from '@anvil/shared/protocol';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WebSocket } from 'ws';
import { systemClock } from '../../agent/src/clock.ts';
import { DEFAULT_BACKOFF } from '../../agent/src/connection/backoff.ts';
import { fileCredentialStore } from '../../agent/src/connection/credential-store.ts';
import { runConnectionLoop } from '../../agent/src/connection/loop.ts';
import { runCredentialRenewal } from '../../agent/src/connection/renewal.ts';
import { wsDialer } from '../../agent/src/connection/transport.ts';
import { connectUrl } from '../../agent/src/connection/url.ts';
import { createTestApp, ManualClock, type TestApp } from '../../control-plane/src/testing/index.ts';
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
    ws.once('unexpected-response', (_req, res) => {
      const after = res.headers['retry-after'];
      reject(new Error(`HTTP ${res.statusCode}${after === undefined ? '' : ` retry-after ${after}`}`));
    });
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

async function start(
  env: Record<string, string> = {},
  clock?: ManualClock,
): Promise<{ t: TestApp; url: string }> {
  const t = await createTestApp({ env, ...(clock ? { clock } : {}) });
  apps.push(t);
  return { t, url: await t.app.listen({ host: '127.0.0.1', port: 0 }) };
}

async function peer(url: string): Promise<Peer> {
  const p = await open(url);
  peers.push(p);
  return p;
}

/** A hello on a fresh socket; answers the welcome or the refusal. */
async function hello(url: string, hostId: string, credential: string): Promise<Record<string, unknown>> {
  const p = await peer(url);
  p.send(createMessage('hello', { agentVersion: 'test', hostId, credential, inventory: sampleInventory() }));
  const answer = await waitFor('welcome or refusal', async () =>
    p.received.find((m) => m['type'] === 'welcome' || m['type'] === 'refusal'),
  );
  // One connection of a host at a time: this one goes before the next hello.
  p.ws.close();
  await p.closed;
  return answer;
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
    const steps: Array<[string, () => Promise<unknown>, RegExp]> = [
      // Told when to come back (HelloAdmission), not left to guess.
      ['a fourth idle socket', () => peer(url), /^HTTP 503 retry-after [1-9]\d*$/],
      ['one more after another retry', () => peer(url), /^HTTP 503 retry-after [1-9]\d*$/],
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

describe('host credential rotation', () => {
  it('renews over the channel; the old credential works for the grace, then is refused', async () => {
    const clock = new ManualClock(new Date());
    const { t, url } = await start(
      { ANVIL_HOST_CREDENTIAL_RENEW_SECONDS: '86400', ANVIL_HOST_CREDENTIAL_GRACE_SECONDS: '600' },
      clock,
    );
    const a = await agentOf(t, url);
    const welcome = a.peer.received.find((m) => m['type'] === 'welcome')!;
    expect(welcome).toMatchObject({ credentialRenewSeconds: 86400, credentialIssuedAt: expect.any(Number) });

    a.peer.send(createMessage('renew_credential', {}));
    const renewed = (await a.peer.next('credential_renewed')) as {
      credential: string;
      previousValidUntil: number;
    };
    expect(renewed.credential).not.toBe(a.credential);
    expect(renewed.previousValidUntil).toBe(clock.now().getTime() + 600_000);
    // The renewing connection stays.
    expect(t.context.fleet.agents.isConnectedHere(a.hostId)).toBe(true);
    a.peer.ws.close();
    await a.peer.closed;

    const cases: Array<[string, number, string, string, Record<string, unknown>]> = [
      ['the new credential', 0, 'new', 'welcome', { credentialIssuedAt: clock.now().getTime() }],
      // Presenting the replaced one within the grace: welcomed, and told to renew at once.
      ['the old credential within the grace', 599, 'old', 'welcome', { credentialIssuedAt: 0 }],
      ['the old credential after the grace', 601, 'old', 'refusal', { code: 'credential_invalid' }],
      ['the new credential after the grace', 601, 'new', 'welcome', {}],
    ];
    const start0 = clock.now().getTime();
    for (const [what, atSeconds, which, type, fields] of cases) {
      clock.set(new Date(start0 + atSeconds * 1000));
      const answer = await hello(url, a.hostId, which === 'new' ? renewed.credential : a.credential);
      expect(answer, what).toMatchObject({ type, ...fields });
    }
  });

  it('refuses a renewal before hello', async () => {
    const { url } = await start();
    const p = await peer(url);
    p.send(createMessage('renew_credential', {}));
    expect(await p.next('refusal')).toMatchObject({ code: 'bad_message' });
  });

  it("the real agent's connection code renews, stores the new credential 0600, and uses it", async () => {
    const { t, url } = await start({
      ANVIL_HOST_CREDENTIAL_RENEW_SECONDS: '1',
      ANVIL_HOST_CREDENTIAL_GRACE_SECONDS: '600',
    });
    const dir = await mkdtemp(join(tmpdir(), 'anvil-renew-'));
    try {
      const credentials = fileCredentialStore(dir);
      const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
      const logger = pino({ level: 'silent' });
      const stop = new AbortController();
      let first: string | null = null;
      const renewedTo: string[] = [];
      await runConnectionLoop(
        {
          url: connectUrl(url),
          controlPlane: url,
          dial: wsDialer({ handshakeTimeoutMs: 30_000 }),
          clock: systemClock,
          logger,
          backoff: DEFAULT_BACKOFF,
          protocolVersion: PROTOCOL_VERSION,
          credentials,
          joinToken: value,
          hostname: 'renewal-test',
          agentVersion: 'test',
          inventory: async () => sampleInventory(),
          timeoutMs: 30_000,
        },
        async (channel, result, signal) => {
          first = result.credential.credential;
          await runCredentialRenewal(
            channel,
            {
              credential: result.credential,
              welcome: result.welcome,
              credentials,
              clock: systemClock,
              logger,
              timeoutMs: 30_000,
              renewed: (next) => {
                renewedTo.push(next.credential);
                stop.abort();
              },
            },
            signal,
          );
        },
        stop.signal,
      );
      expect(renewedTo).toHaveLength(1);
      const saved = (await credentials.load())!;
      expect(saved.credential).toBe(renewedTo[0]);
      expect(saved.credential).not.toBe(first);
      expect((await stat(credentials.path)).mode & 0o777).toBe(0o600);
      const hostId = saved.hostId;
      await waitFor('the old connection gone', async () => !t.context.fleet.agents.isConnectedHere(hostId));
      expect(await hello(url, hostId, saved.credential)).toMatchObject({ type: 'welcome' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

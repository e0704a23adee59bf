import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROTOCOL_VERSION } from '@anvil/shared/protocol';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { Clock } from '../clock.ts';
import { backoffDelay, retryAfterDelay } from './backoff.ts';
import { fileCredentialStore } from './credential-store.ts';
import { runConnectionLoop } from './loop.ts';
import { retryAfterMs, wsDialer } from './transport.ts';
import { connectUrl } from './url.ts';

describe('backoff', () => {
  const policy = { baseMs: 1_000, maxMs: 60_000 };
  it('grows exponentially up to the cap, with half of each step random', () => {
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, policy, () => 0))).toEqual([500, 1_000, 2_000, 4_000]);
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, policy, () => 1))).toEqual([1_000, 2_000, 4_000, 8_000]);
    expect(backoffDelay(50, policy, () => 1)).toBe(60_000);
    expect(backoffDelay(50, policy, () => 0)).toBe(30_000);
  });
  it('spreads agents that lost the control plane at the same moment', () => {
    const delays = new Set(Array.from({ length: 50 }, () => backoffDelay(4, policy)));
    expect(delays.size).toBeGreaterThan(40);
  });
});

describe('a control plane that turns dials away as busy', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
  });

  /** A server that answers every upgrade with 503 and `headers`. */
  async function busy(headers: Record<string, string>): Promise<string> {
    const server = createServer((_req, res) => res.writeHead(404).end());
    server.on('upgrade', (_req, socket) => {
      const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
      socket.end(
        `HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n${extra.join('')}Content-Length: 0\r\n\r\n`,
      );
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `ws://127.0.0.1:${(server.address() as AddressInfo).port}/agent/connect`;
  }

  /** Runs the real connection loop until it waits to redial; answers the waits it chose, in ms. */
  async function waits(url: string, count: number): Promise<number[]> {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-loop-'));
    const abort = new AbortController();
    const chosen: number[] = [];
    const clock: Clock = {
      now: () => Date.now(),
      setTimeout: (fn, ms) => {
        chosen.push(ms);
        if (chosen.length >= count) abort.abort();
        return setTimeout(fn, 0);
      },
      clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
    };
    await runConnectionLoop(
      {
        url,
        dial: wsDialer({ handshakeTimeoutMs: 5_000 }),
        clock,
        logger: pino({ level: 'silent' }),
        backoff: { baseMs: 1_000, maxMs: 60_000 },
        protocolVersion: PROTOCOL_VERSION,
        random: () => 0.5,
        controlPlane: url,
        credentials: fileCredentialStore(join(dir, 'credential.json')),
        joinToken: 'anvjt_unused',
        hostname: 'h',
        agentVersion: '0.0.0',
        inventory: () => Promise.reject(new Error('no hello reaches a busy control plane')),
        timeoutMs: 5_000,
      },
      async () => {},
      abort.signal,
    );
    return chosen;
  }

  it('comes back when Retry-After says, with jitter, and its backoff does not grow meanwhile', async () => {
    expect(await waits(await busy({ 'Retry-After': '7' }), 3)).toEqual([
      retryAfterDelay(7_000, () => 0.5),
      retryAfterDelay(7_000, () => 0.5),
      retryAfterDelay(7_000, () => 0.5),
    ]);
    expect(retryAfterDelay(7_000, () => 0.5)).toBe(7_875);
    // Without a hint, the capped exponential backoff.
    expect(await waits(await busy({}), 3)).toEqual([750, 1_500, 3_000]);
  });

  it('never earlier than asked, spread over a quarter more (at least a second)', () => {
    expect(retryAfterDelay(2_000, () => 0)).toBe(2_000);
    expect(retryAfterDelay(2_000, () => 1)).toBe(3_000);
    expect(retryAfterDelay(20_000, () => 1)).toBe(25_000);
    const spread = new Set(Array.from({ length: 50 }, () => retryAfterDelay(5_000)));
    expect(spread.size).toBeGreaterThan(40);
    expect(retryAfterMs('5')).toBe(5_000);
    expect(retryAfterMs(['3'])).toBe(3_000);
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:00 GMT')).toBeNull();
    expect(retryAfterMs(undefined)).toBeNull();
  });
});

describe('control plane url', () => {
  it.each([
    ['https://cp.example.com', 'wss://cp.example.com/agent/v1/connect'],
    ['http://127.0.0.1:8080/', 'ws://127.0.0.1:8080/agent/v1/connect'],
    ['https://example.com/anvil?x=1', 'wss://example.com/anvil/agent/v1/connect'],
    ['wss://cp', 'wss://cp/agent/v1/connect'],
  ])('%s -> %s', (input, expected) => {
    expect(connectUrl(input)).toBe(expected);
  });
  it('refuses what is not a control plane url', () => {
    expect(() => connectUrl('cp.example.com')).toThrow('is not a URL');
    expect(() => connectUrl('ftp://cp')).toThrow('must be http(s) or ws(s)');
  });
});

describe('credential store', () => {
  it('saves with mode 0600 in a 0700 directory and reads it back', async () => {
    const dir = join(await mkdtemp(join(tmpdir(), 'anvil-cred-')), 'state');
    const store = fileCredentialStore(dir);
    expect(await store.load()).toBeNull();
    const credential = {
      hostId: 'host_1',
      credential: 's3cret',
      controlPlane: 'https://cp',
      createdAt: 'now',
    };
    await store.save(credential);
    expect((await stat(store.path)).mode & 0o777).toBe(0o600);
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    expect(await store.load()).toEqual(credential);
    expect(JSON.parse(await readFile(store.path, 'utf8'))).toEqual(credential);
  });

  it('tightens a credential file restored with loose permissions', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-cred-'));
    const store = fileCredentialStore(dir);
    await writeFile(store.path, JSON.stringify({ hostId: 'h', credential: 'c' }), { mode: 0o644 });
    await store.load();
    expect((await stat(store.path)).mode & 0o777).toBe(0o600);
  });

  it('says which file is broken', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-cred-'));
    const store = fileCredentialStore(dir);
    await writeFile(store.path, '{"hostId": 1}');
    await expect(store.load()).rejects.toThrow(`read credential ${store.path}: missing hostId or credential`);
  });
});

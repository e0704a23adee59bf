import { generateApiKey, hashApiKey, newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApiKey } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

const START = new Date('2026-05-01T10:20:00.000Z');

describe('GET /v2/analytics/api-usage', () => {
  let t: TestApp;
  let clock: ManualClock;

  beforeEach(async () => {
    clock = new ManualClock(START);
    t = await createTestApp({
      clock,
      extend: (app) => {
        app.delete('/v2/accounts/things/:id', { config: { scope: 'accounts' } }, async () => ({ ok: true }));
      },
    });
  });
  afterEach(async () => t.close());

  const usage = (period?: string, key?: string) =>
    t.app.inject({
      method: 'GET',
      url: '/v2/analytics/api-usage',
      query: period === undefined ? {} : { period },
      headers: t.auth(key),
    });

  const createKey = (body: Record<string, unknown>) => createApiKey(t, body);

  /** A second account with its own key, written directly: account administration is not here yet. */
  async function otherAccountKey(): Promise<string> {
    const prisma = t.context.db.prisma;
    const accountId = newId('acc');
    const userId = newId('usr');
    const value = generateApiKey('live');
    await prisma.account.create({ data: { id: accountId, name: 'Other', tier: 'pro' } });
    await prisma.user.create({ data: { id: userId, accountId, email: 'other@example.com', role: 'owner' } });
    await prisma.apiKey.create({
      data: {
        id: newId('key'),
        accountId,
        userId,
        name: 'other',
        type: 'read_write',
        environment: 'live',
        permissions: ['read', 'write'],
        scopes: ['accounts'],
        displayPrefix: value.slice(0, 13),
        hash: hashApiKey(value),
      },
    });
    return value;
  }

  it("counts the account's requests by route, status and key, every status after authentication included", async () => {
    const ownerKeyId = (
      await t.context.db.prisma.apiKey.findUniqueOrThrow({ where: { hash: hashApiKey(t.ownerKey) } })
    ).id;
    const read = await createKey({ name: 'reader', permissions: ['read'], scopes: ['accounts'] });
    const dev = await createKey({
      name: 'dev',
      permissions: ['read', 'write'],
      scopes: ['accounts'],
      environment: 'test',
    });
    for (let i = 0; i < 3; i++) await t.app.inject({ url: '/v2/auth/verify', headers: t.auth() });
    await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(dev.value) });
    const forbidden = await t.app.inject({
      method: 'POST',
      url: '/v2/auth/api-keys',
      headers: t.auth(read.value),
      payload: { name: 'x', permissions: ['read'] },
    });
    expect(forbidden.statusCode).toBe(403);
    const missing = await t.app.inject({
      method: 'DELETE',
      url: '/v2/auth/api-keys/key_nope',
      headers: t.auth(),
    });
    expect(missing.statusCode).toBe(404);
    // DELETE /accounts/* is limited to 10 an hour: the 11th answers 429 and is recorded too.
    for (let i = 0; i < 11; i++) {
      await t.app.inject({ method: 'DELETE', url: `/v2/accounts/things/${i}`, headers: t.auth(dev.value) });
    }
    // Not recorded: no valid key means no account; other accounts' requests are theirs.
    await t.app.inject({ url: '/v2/auth/verify', headers: { authorization: 'Bearer nope' } });
    const other = await otherAccountKey();
    await t.app.inject({ url: '/v2/auth/verify', headers: t.auth(other) });

    const res = await usage('24h');
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      period: '24h',
      periodStart: '2026-04-30T10:20:00.000Z',
      periodEnd: START.toISOString(),
      totalRequests: 19,
      errorCount: 3,
      errorRate: Number((3 / 19).toFixed(4)),
      byStatus: { '200': 14, '201': 2, '403': 1, '404': 1, '429': 1 },
    });
    const routes = Object.fromEntries(
      body.byRoute.map((r: { method: string; route: string }) => [`${r.method} ${r.route}`, r]),
    );
    expect(Object.keys(routes).sort()).toEqual([
      'DELETE /v2/accounts/things/:id',
      'DELETE /v2/auth/api-keys/:key_id',
      'GET /v2/auth/verify',
      'POST /v2/auth/api-keys',
    ]);
    expect(routes['DELETE /v2/accounts/things/:id']).toMatchObject({ count: 11, errorCount: 1 });
    expect(routes['GET /v2/auth/verify']).toMatchObject({ count: 4, errorCount: 0 });
    expect(routes['POST /v2/auth/api-keys']).toMatchObject({ count: 3, errorCount: 1 });
    expect(routes['DELETE /v2/auth/api-keys/:key_id']).toMatchObject({ count: 1, errorCount: 1 });
    expect(body.byRoute[0].route).toBe('/v2/accounts/things/:id');
    for (const route of body.byRoute) {
      expect(route.avgDurationMs).toBeGreaterThan(0);
      expect(route.p95DurationMs).toBeGreaterThanOrEqual(0);
    }
    expect(body.byKey).toEqual([
      { keyId: dev.key.id, name: 'dev', environment: 'test', count: 12 },
      { keyId: ownerKeyId, name: 'Owner bootstrap key', environment: 'live', count: 6 },
      { keyId: read.key.id, name: 'reader', environment: 'live', count: 1 },
    ]);
  });

  it('reads only the chosen period, 24h by default', async () => {
    await t.app.inject({ url: '/v2/auth/verify', headers: t.auth() });
    clock.advance(2 * 3_600_000);
    await t.app.inject({ url: '/v2/auth/verify', headers: t.auth() });

    const hour = (await usage('1h')).json();
    expect(hour.totalRequests).toBe(1);
    expect(hour.periodStart).toBe('2026-05-01T11:20:00.000Z');
    // The 1h report itself is now recorded, inside every longer period.
    const day = (await usage()).json();
    expect(day.period).toBe('24h');
    expect(day.totalRequests).toBe(3);
    clock.advance(8 * 86_400_000);
    expect((await usage('7d')).json().totalRequests).toBe(0);
    expect((await usage('30d')).json().totalRequests).toBe(5);
    expect((await usage('90d')).json().byRoute.map((r: { route: string }) => r.route)).toContain(
      '/v2/analytics/api-usage',
    );
  });

  it.each([
    ['2w', '2w'],
    ['1y', '1y'],
    ['day', 'day'],
    ['an empty value', ''],
    ['a 300-character value (echoed shortened)', 'x'.repeat(300)],
  ])('answers INVALID_PERIOD for %s', async (_label, period) => {
    const res = await usage(period);
    expect(res.statusCode).toBe(400);
    const body = res.json();
    expect(body).toMatchObject({
      error: 'INVALID_PERIOD',
      code: 400,
      details: { validPeriods: ['1h', '24h', '7d', '30d', '90d'] },
    });
    expect(body.details.received).toBe(period.length > 100 ? `${period.slice(0, 100)}…` : period);
  });

  it('needs the accounts scope', async () => {
    const key = await createKey({ name: 'c', permissions: ['read'], scopes: ['clusters'] });
    const res = await usage('24h', key.value);
    expect(res.statusCode).toBe(403);
    expect(res.json().required_permission).toBe('accounts:read');
  });
});

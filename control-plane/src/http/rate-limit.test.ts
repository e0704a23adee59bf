import { afterEach, describe, expect, it } from 'vitest';
import { openPostgres } from '../db/index.ts';
import { createApiKey } from '../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../testing/index.ts';

const START = new Date('2026-05-01T10:20:00.000Z');
const NEXT_HOUR = Date.parse('2026-05-01T11:00:00.000Z');

/** A test-only route standing in for an area that does not exist yet; it counts its handler runs. */
function fixtures(calls: Map<string, number>) {
  const handled = (name: string) => () => {
    calls.set(name, (calls.get(name) ?? 0) + 1);
    return { ok: true };
  };
  return (app: TestApp['app']) => {
    app.delete('/v2/accounts/things/:id', { config: { scope: 'accounts' } }, handled('delete-account-thing'));
  };
}

describe('rate limiting', () => {
  let t: TestApp;
  let clock: ManualClock;
  let calls: Map<string, number>;
  const cleanup: Array<() => Promise<void>> = [];

  async function setup(tier: 'free' | 'pro' | 'enterprise') {
    clock = new ManualClock(START);
    calls = new Map();
    t = await createTestApp({ clock, extend: fixtures(calls) });
    await setTier(tier);
  }

  async function setTier(tier: string) {
    await t.context.db.prisma.account.update({ where: { id: t.accountId }, data: { tier } });
    await t.context.keys.invalidate();
  }

  afterEach(async () => {
    while (cleanup.length > 0) await cleanup.pop()!();
    await t.close();
  });

  const verify = (headers: Record<string, string> = {}, app = t.app) =>
    app.inject({ method: 'GET', url: '/v2/auth/verify', headers: { ...t.auth(), ...headers } });

  const createKey = async (body: Record<string, unknown>) => (await createApiKey(t, body)).value;

  it('puts the headers on every authenticated response, errors included, and none on others', async () => {
    await setup('enterprise');
    const readKey = await createKey({ name: 'r', permissions: ['read'], scopes: ['accounts'] });
    const ok = await verify();
    expect(ok.statusCode).toBe(200);
    expect(ok.headers['x-ratelimit-limit']).toBe('10000');
    expect(ok.headers['x-ratelimit-remaining']).toBe('9999');
    expect(ok.headers['x-ratelimit-reset']).toBe(String(NEXT_HOUR / 1000));
    expect(ok.headers['x-ratelimit-window']).toBe('3600');

    const responses = {
      forbidden: await t.app.inject({
        method: 'POST',
        url: '/v2/auth/api-keys',
        headers: t.auth(readKey),
        payload: { name: 'x', permissions: ['read'] },
      }),
      notFound: await t.app.inject({
        method: 'DELETE',
        url: '/v2/auth/api-keys/key_nope',
        headers: t.auth(),
      }),
      invalid: await t.app.inject({
        method: 'POST',
        url: '/v2/auth/api-keys',
        headers: t.auth(),
        payload: { name: '' },
      }),
    };
    expect(responses.forbidden.statusCode).toBe(403);
    expect(responses.notFound.statusCode).toBe(404);
    expect(responses.invalid.statusCode).toBe(400);
    for (const res of Object.values(responses)) {
      for (const header of ['limit', 'remaining', 'reset', 'window']) {
        expect(res.headers[`x-ratelimit-${header}`], `${res.statusCode} x-ratelimit-${header}`).toMatch(
          /^\d+$/,
        );
      }
    }
    // The read key's GET and the owner's writes count against the same account.
    expect(responses.forbidden.headers['x-ratelimit-limit']).toBe('2000');

    const unauthenticated = await t.app.inject({ url: '/v2/auth/verify' });
    expect(unauthenticated.statusCode).toBe(401);
    expect(unauthenticated.headers['x-ratelimit-limit']).toBeUndefined();
    expect((await t.app.inject({ url: '/healthz' })).headers['x-ratelimit-limit']).toBeUndefined();
  });

  it.each([
    ['free', 100],
    ['pro', 1000],
    ['enterprise', 10000],
  ] as const)('applies the %s read limit of %i per hour', async (tier, limit) => {
    await setup(tier);
    const first = await verify();
    expect(first.headers['x-ratelimit-limit']).toBe(String(limit));
    expect(first.headers['x-ratelimit-remaining']).toBe(String(limit - 1));
  });

  it('refuses the request after the tier limit with 429 RATE_LIMITED, Retry-After, and without counting it', async () => {
    await setup('free');
    for (let i = 0; i < 100; i++) expect((await verify()).statusCode).toBe(200);
    const refused = await verify();
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('2400');
    expect(refused.headers['x-ratelimit-remaining']).toBe('0');
    expect(refused.headers['x-ratelimit-limit']).toBe('100');
    expect(refused.json()).toEqual({
      error: 'RATE_LIMITED',
      message: expect.stringContaining('100 read_operations per hour'),
      code: 429,
      retry_after: 2400,
      details: {
        limit: 100,
        remaining: 0,
        reset_at: new Date(NEXT_HOUR).toISOString(),
        retry_after: 2400,
        window_seconds: 3600,
        limit_name: 'read_operations',
      },
    });
    // Refusals are not counted: the shared counter holds exactly the admitted requests.
    await verify();
    await t.context.rateLimits.limiter.sync();
    const rows = await t.context.db.prisma.rateLimitCounter.findMany({
      where: { bucket: `${t.accountId}:read_operations` },
    });
    expect(rows.map((r) => r.count)).toEqual([100]);
    // Writes have their own limit.
    const write = await t.app.inject({
      method: 'POST',
      url: '/v2/auth/api-keys',
      headers: t.auth(),
      payload: { name: 'w', permissions: ['read'] },
    });
    expect(write.statusCode).toBe(201);
    // The next window starts from zero.
    clock.set(new Date(NEXT_HOUR));
    const next = await verify();
    expect(next.statusCode).toBe(200);
    expect(next.headers['x-ratelimit-remaining']).toBe('99');
  });

  it('applies endpoint-specific limits with 429 RATE_LIMIT_EXCEEDED, and the handler never runs', async () => {
    await setup('enterprise');
    const del = () => t.app.inject({ method: 'DELETE', url: '/v2/accounts/things/x', headers: t.auth() });
    const first = await del();
    expect(first.statusCode).toBe(200);
    // The most restrictive applicable limit is reported: DELETE /accounts/* (10/h), not writes (2000/h).
    expect(first.headers['x-ratelimit-limit']).toBe('10');
    expect(first.headers['x-ratelimit-remaining']).toBe('9');
    for (let i = 0; i < 9; i++) expect((await del()).statusCode).toBe(200);
    const refused = await del();
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('2400');
    expect(refused.json()).toEqual({
      error: 'RATE_LIMIT_EXCEEDED',
      message: expect.stringContaining('DELETE /accounts/*'),
      code: 429,
      details: {
        limit: 10,
        remaining: 0,
        reset_at: new Date(NEXT_HOUR).toISOString(),
        retry_after: 2400,
        window_seconds: 3600,
        limit_name: 'DELETE /accounts/*',
      },
    });
    expect(calls.get('delete-account-thing')).toBe(10);
    // Other writes are untouched by that endpoint's limit.
    const verifyAfter = await verify();
    expect(verifyAfter.statusCode).toBe(200);
  });

  it('answers the wrapped shape on /v1 routes, for endpoint and tier limits', async () => {
    await setup('pro');
    // The real create route: with no host in the fleet its handler answers 422 INSUFFICIENT_RESOURCES, so a 429
    // proves the limiter answered before the handler ran.
    const create = () =>
      t.app.inject({
        method: 'POST',
        url: '/v1/clusters',
        headers: t.auth(),
        payload: { name: 'limited', docker_image: 'busybox', gpu_type: 'H100', gpu_count: 1 },
      });
    for (let i = 0; i < 20; i++) expect((await create()).statusCode).toBe(422);
    const endpoint = await create();
    expect(endpoint.statusCode).toBe(429);
    const body = endpoint.json();
    expect(body).toMatchObject({
      success: false,
      error: {
        code: 'RATE_LIMIT_EXCEEDED',
        details: { limit: 20, remaining: 0, retry_after: 2400, reset_at: new Date(NEXT_HOUR).toISOString() },
      },
      meta: { request_id: endpoint.headers['x-request-id'] },
    });
    expect(body.error.message).toEqual(expect.any(String));

    // On the Free tier the 20 writes so far spend the write limit (20/h) too.
    await setTier('free');
    const start = await t.app.inject({ method: 'POST', url: '/v1/clusters/c1/start', headers: t.auth() });
    expect(start.statusCode).toBe(429);
    expect(start.headers['retry-after']).toBe('2400');
    expect(start.json()).toMatchObject({
      success: false,
      error: {
        code: 'RATE_LIMITED',
        retry_after: 2400,
        details: { limit: 20, remaining: 0, retry_after: 2400, limit_name: 'write_operations' },
      },
    });
  });

  it('limits training jobs per day on top of the hourly limits', async () => {
    await setup('free');
    // The real route, with a body it refuses (400): the limit counts requests, before validation, and
    // no job (with its containers) is started.
    const create = () =>
      t.app.inject({ method: 'POST', url: '/v2/training/jobs', headers: t.auth(), payload: {} });
    const first = await create();
    expect(first.statusCode).toBe(400);
    expect(first.headers['x-ratelimit-limit']).toBe('5');
    expect(first.headers['x-ratelimit-window']).toBe('86400');
    for (let i = 0; i < 4; i++) expect((await create()).statusCode).toBe(400);
    const refused = await create();
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toMatchObject({
      error: 'RATE_LIMITED',
      details: { limit: 5, limit_name: 'training_jobs' },
    });
    expect(refused.headers['retry-after']).toBe(
      String((Date.parse('2026-05-02T00:00:00Z') - START.getTime()) / 1000),
    );
    // Enterprise training is unlimited: only the hourly endpoint limit (10) applies.
    await setTier('enterprise');
    const enterprise = await create();
    expect(enterprise.statusCode).toBe(400);
    expect(enterprise.headers['x-ratelimit-limit']).toBe('10');
    expect(enterprise.headers['x-ratelimit-remaining']).toBe('4');
  });

  it('lets X-Priority: high requests use a 10% reserve once the limit is spent', async () => {
    await setup('free');
    for (let i = 0; i < 100; i++) await verify();
    expect((await verify()).statusCode).toBe(429);
    const priority = await verify({ 'x-priority': 'high' });
    expect(priority.statusCode).toBe(200);
    expect(priority.headers['x-ratelimit-remaining']).toBe('0');
    expect(priority.headers['x-ratelimit-reserve-remaining']).toBe('9');
    for (let i = 0; i < 9; i++) expect((await verify({ 'x-priority': 'HIGH' })).statusCode).toBe(200);
    const spent = await verify({ 'x-priority': 'high' });
    expect(spent.statusCode).toBe(429);
    expect(spent.headers['x-ratelimit-reserve-remaining']).toBe('0');
    // Other values mean nothing special.
    expect((await verify({ 'x-priority': 'low' })).statusCode).toBe(429);
  });

  it('shares counters between two app instances on one database', async () => {
    await setup('free');
    // On PostgreSQL the second instance gets its own connection pool, as a second process would.
    const db = t.database.url ? openPostgres(t.database.url, 2) : t.database.db;
    const other = await createTestApp({
      clock,
      database: { db, url: t.database.url, drop: async () => {} },
    });
    cleanup.push(async () => {
      await other.app.close();
      await other.context.stop();
      if (db !== t.database.db) await db.close();
    });

    for (let i = 0; i < 30; i++) expect((await verify()).statusCode).toBe(200);
    await t.context.rateLimits.limiter.sync();
    // The other instance learns the shared count before deciding on a counter it has not seen.
    const seen = await verify({}, other.app);
    expect(seen.headers['x-ratelimit-remaining']).toBe('69');

    let admitted = 31;
    for (let i = 0; i < 100; i++) {
      const res = await verify({}, i % 2 === 0 ? t.app : other.app);
      if (res.statusCode === 200) admitted++;
      else expect(res.statusCode).toBe(429);
    }
    // Two processes, A = 1 for a limit of 100: at most N*A - 1 = 1 request above the limit.
    expect(admitted).toBeGreaterThanOrEqual(100);
    expect(admitted).toBeLessThanOrEqual(101);
    await t.context.rateLimits.limiter.sync();
    await other.context.rateLimits.limiter.sync();
    const row = await t.context.db.prisma.rateLimitCounter.findFirstOrThrow({
      where: { bucket: `${t.accountId}:read_operations` },
    });
    expect(row.count).toBe(admitted);
  });
});

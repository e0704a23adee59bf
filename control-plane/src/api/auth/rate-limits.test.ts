import { hashApiKey } from '@anvil/shared';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { addMember, createApiKey } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

const START = new Date('2026-05-01T10:20:00.000Z');
const NEXT_HOUR = '2026-05-01T11:00:00.000Z';

describe('GET /v2/auth/rate-limits and POST /v2/auth/temporary-boost', () => {
  let t: TestApp;
  let clock: ManualClock;
  const cleanup: Array<() => Promise<void>> = [];

  async function setup(tier: string) {
    clock = new ManualClock(START);
    t = await createTestApp({ clock });
    await t.context.db.prisma.account.update({ where: { id: t.accountId }, data: { tier } });
    await t.context.keys.invalidate();
  }

  afterEach(async () => {
    while (cleanup.length > 0) await cleanup.pop()!();
    await t.close();
  });

  const status = (key?: string) =>
    t.app.inject({ method: 'GET', url: '/v2/auth/rate-limits', headers: t.auth(key) });
  const boost = (payload: unknown, key?: string) =>
    t.app.inject({
      method: 'POST',
      url: '/v2/auth/temporary-boost',
      headers: t.auth(key),
      payload: payload as object,
    });

  const createKey = (body: Record<string, unknown>) => createApiKey(t, body);

  it('reports every limit with the real counts of the current windows', async () => {
    await setup('pro');
    for (let i = 0; i < 5; i++) await t.app.inject({ url: '/v2/auth/verify', headers: t.auth() });
    await createKey({ name: 'a', permissions: ['read'], scopes: ['clusters'] });
    const { value: clustersKey } = await createKey({
      name: 'b',
      permissions: ['read'],
      scopes: ['clusters'],
    });
    await t.app.inject({ url: '/v2/auth/api-keys', headers: t.auth() });

    // Any valid key may ask, whatever its scopes; the answer is the account's.
    const res = await status(clustersKey);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.tier).toBe('pro');
    expect(body.boost).toBeNull();
    expect(body.priority_reserve).toEqual({ fraction: 0.1 });
    // 5 verifies, 1 key listing and this request are reads; 2 key creations are writes.
    expect(body.limits).toEqual({
      read_operations: {
        limit: 1000,
        remaining: 993,
        reset_at: NEXT_HOUR,
        window_seconds: 3600,
        base_limit: 1000,
      },
      write_operations: {
        limit: 200,
        remaining: 198,
        reset_at: NEXT_HOUR,
        window_seconds: 3600,
        base_limit: 200,
      },
      ai_services: { limit: 500, remaining: 500, reset_at: NEXT_HOUR, window_seconds: 3600, base_limit: 500 },
      training_jobs: {
        limit: 20,
        remaining: 20,
        reset_at: '2026-05-02T00:00:00.000Z',
        window_seconds: 86400,
        base_limit: 20,
      },
    });
    expect(res.headers['x-ratelimit-remaining']).toBe('993');
    expect(body.endpoint_limits).toHaveLength(18);
    expect(body.endpoint_limits).toContainEqual({
      operation: 'POST /clusters',
      limit: 20,
      remaining: 20,
      reset_at: NEXT_HOUR,
      window_seconds: 3600,
      base_limit: 20,
    });
  });

  it('reports unlimited training jobs on Enterprise as null', async () => {
    await setup('enterprise');
    const body = (await status()).json();
    expect(body.limits.training_jobs).toMatchObject({ limit: null, remaining: null, base_limit: null });
    expect(body.limits.read_operations.limit).toBe(10000);
  });

  it('boosts every limit of the account until the boost expires, recorded with its reason and key', async () => {
    await setup('free');
    const res = await boost({ multiplier: 3, duration: '2h', reason: 'product launch' });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    const ownerKey = await t.context.db.prisma.apiKey.findUniqueOrThrow({
      where: { hash: hashApiKey(t.ownerKey) },
    });
    expect(body.boost).toEqual({
      id: expect.stringMatching(/^boost_/),
      multiplier: 3,
      reason: 'product launch',
      startsAt: START.toISOString(),
      expiresAt: '2026-05-01T12:20:00.000Z',
      createdByKeyId: ownerKey.id,
      createdAt: START.toISOString(),
    });
    expect(body.limits.read_operations).toMatchObject({ limit: 300, base_limit: 100, remaining: 300 });
    expect(body.limits.write_operations).toMatchObject({ limit: 60, base_limit: 20, remaining: 59 });
    expect(body.limits.training_jobs).toMatchObject({ limit: 15, base_limit: 5 });
    expect(body.endpoint_limits).toContainEqual(
      expect.objectContaining({ operation: 'POST /clusters', limit: 60 }),
    );
    expect(body.message).toContain('2026-05-01T12:20:00.000Z');

    const row = await t.context.db.prisma.rateLimitBoost.findUniqueOrThrow({ where: { id: body.boost.id } });
    expect(row).toMatchObject({
      accountId: t.accountId,
      multiplier: 3,
      reason: 'product launch',
      createdByKeyId: ownerKey.id,
    });

    const verify = await t.app.inject({ url: '/v2/auth/verify', headers: t.auth() });
    expect(verify.headers['x-ratelimit-limit']).toBe('300');
    // 150 reads: above the Free limit, inside the boosted one.
    for (let i = 0; i < 149; i++)
      expect((await t.app.inject({ url: '/v2/auth/verify', headers: t.auth() })).statusCode).toBe(200);
    expect((await status()).json().boost).toMatchObject({ id: body.boost.id, multiplier: 3 });

    // One boost at a time: a second one is refused, not stacked or extended.
    const again = await boost({ multiplier: 3, duration: '72h', reason: 'more' });
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({
      error: 'BOOST_ALREADY_ACTIVE',
      code: 409,
      details: { boostId: body.boost.id, multiplier: 3, expiresAt: '2026-05-01T12:20:00.000Z' },
    });
    expect(await t.context.db.prisma.rateLimitBoost.count()).toBe(1);

    // At expiry the Free limits are back; a new boost may be asked for once the cooldown has passed.
    clock.set(new Date('2026-05-01T12:20:00.000Z'));
    const after = (await status()).json();
    expect(after.boost).toBeNull();
    expect(after.limits.read_operations).toMatchObject({ limit: 100, base_limit: 100 });
    clock.set(new Date('2026-05-08T12:20:00.000Z'));
    expect((await boost({ multiplier: 1.5, duration: '30m', reason: 'again' })).statusCode).toBe(201);
  });

  it('announces a boost to the other control-plane processes', async () => {
    await setup('free');
    const other = await createTestApp({ clock, database: { ...t.database, drop: async () => {} } });
    cleanup.push(async () => {
      await other.app.close();
      await other.context.stop();
    });
    expect((await boost({ multiplier: 2, duration: '1h', reason: 'batch import' })).statusCode).toBe(201);
    await vi.waitFor(async () => {
      const res = await other.app.inject({ url: '/v2/auth/verify', headers: t.auth() });
      expect(res.headers['x-ratelimit-limit']).toBe('200');
    });
  });

  it.each([
    ['multiplier', { multiplier: 1, duration: '1h', reason: 'r' }],
    ['multiplier', { multiplier: 0.5, duration: '1h', reason: 'r' }],
    ['multiplier', { multiplier: 10.5, duration: '1h', reason: 'r' }],
    ['multiplier', { multiplier: 'lots', duration: '1h', reason: 'r' }],
    ['multiplier', { duration: '1h', reason: 'r' }],
    ['duration', { multiplier: 2, duration: '73h', reason: 'r' }],
    ['duration', { multiplier: 2, duration: '7d', reason: 'r' }],
    ['duration', { multiplier: 2, duration: '0m', reason: 'r' }],
    ['duration', { multiplier: 2, duration: '30s', reason: 'r' }],
    ['duration', { multiplier: 2, duration: '24', reason: 'r' }],
    ['duration', { multiplier: 2, duration: 24, reason: 'r' }],
    ['reason', { multiplier: 2, duration: '1h' }],
    ['reason', { multiplier: 2, duration: '1h', reason: '' }],
    ['reason', { multiplier: 2, duration: '1h', reason: '   ' }],
    ['reason', { multiplier: 2, duration: '1h', reason: 'x'.repeat(501) }],
    ['extra', { multiplier: 2, duration: '1h', reason: 'r', extra: true }],
  ])('refuses a boost out of bounds with VALIDATION_ERROR on %s (case %#)', async (field, payload) => {
    await setup('enterprise');
    const res = await boost(payload);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: 'VALIDATION_ERROR', code: 400, details: { field } });
    expect(await t.context.db.prisma.rateLimitBoost.count()).toBe(0);
  });

  it('accepts the bounds themselves', async () => {
    await setup('enterprise');
    const res = await boost({ multiplier: 10, duration: '3d', reason: 'r' });
    expect(res.statusCode).toBe(201);
    expect(res.json().boost.expiresAt).toBe('2026-05-04T10:20:00.000Z');
  });

  it('needs accounts:write', async () => {
    await setup('enterprise');
    const read = await createKey({ name: 'r', permissions: ['read'], scopes: ['accounts'] });
    const clusters = await createKey({ name: 'c', permissions: ['read', 'write'], scopes: ['clusters'] });
    for (const key of [read.value, clusters.value]) {
      const res = await boost({ multiplier: 2, duration: '1h', reason: 'r' }, key);
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ error: 'FORBIDDEN', required_permission: 'accounts:write' });
    }
    expect(await t.context.db.prisma.rateLimitBoost.count()).toBe(0);
  });

  interface BoostAnswer {
    error?: string;
    boost: { id: string };
    details?: Record<string, unknown>;
  }

  describe('who may boost, how much, and how often (over real HTTP)', () => {
    let base: string;
    const post = async (key: string, payload: unknown) => {
      const res = await fetch(`${base}/v2/auth/temporary-boost`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      return { status: res.status, body: (await res.json()) as BoostAnswer };
    };
    async function listen(tier: string) {
      await setup(tier);
      base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    }

    it.each([
      ['owner', 201],
      ['admin', 201],
      ['developer', 403],
      ['viewer', 403],
    ])('a %s with an accounts:write key gets %i', async (role, expected) => {
      await listen('enterprise');
      const member = await addMember(t, { role, keyPermissions: ['read', 'write'], keyScopes: ['accounts'] });
      const res = await post(member.key, { multiplier: 2, duration: '1h', reason: 'launch' });
      expect(res.status, JSON.stringify(res.body)).toBe(expected);
      const audit = await t.context.db.prisma.auditEvent.findMany({
        where: { accountId: t.accountId, actorId: member.userId },
      });
      if (expected === 201) {
        expect(audit).toEqual([
          expect.objectContaining({
            type: 'permission_change',
            action: 'temporary_boost_created',
            resourceId: res.body.boost.id,
            details: expect.objectContaining({ multiplier: 2, reason: 'launch', tier: 'enterprise' }),
          }),
        ]);
      } else {
        expect(res.body).toMatchObject({ error: 'INSUFFICIENT_PERMISSIONS' });
        expect(await t.context.db.prisma.rateLimitBoost.count()).toBe(0);
        expect(audit.map((a) => [a.type, a.action])).toEqual([['access_denied', 'temporary_boost_attempt']]);
      }
    });

    it.each([
      ['free', 3, 3.5],
      ['pro', 5, 6],
      ['enterprise', 10, 10.5],
    ])('the %s tier may ask for at most %i (%d is refused)', async (tier, ceiling, over) => {
      await listen(tier);
      const refused = await post(t.ownerKey, { multiplier: over, duration: '1h', reason: 'r' });
      expect(refused.status).toBe(400);
      expect(refused.body).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'multiplier' } });
      expect(await t.context.db.prisma.rateLimitBoost.count()).toBe(0);
      expect((await post(t.ownerKey, { multiplier: ceiling, duration: '1h', reason: 'r' })).status).toBe(201);
    });

    it('cannot be renewed back to back: 7 days of cooldown after a boost ends', async () => {
      await listen('enterprise');
      expect((await post(t.ownerKey, { multiplier: 10, duration: '72h', reason: 'a' })).status).toBe(201);
      const cases: Array<[string, number, string | null]> = [
        ['2026-05-03T10:20:00.000Z', 409, 'BOOST_ALREADY_ACTIVE'],
        ['2026-05-04T10:20:00.000Z', 409, 'BOOST_COOLDOWN'],
        ['2026-05-11T10:19:59.000Z', 409, 'BOOST_COOLDOWN'],
        ['2026-05-11T10:20:00.000Z', 201, null],
      ];
      for (const [at, code, error] of cases) {
        clock.set(new Date(at));
        const res = await post(t.ownerKey, { multiplier: 10, duration: '72h', reason: 'again' });
        expect(res.status, at).toBe(code);
        if (error) expect(res.body.error, at).toBe(error);
      }
      const cooldown = await post(t.ownerKey, { multiplier: 2, duration: '1h', reason: 'x' });
      expect(cooldown.status).toBe(409);
      clock.set(new Date('2026-05-14T10:20:00.000Z'));
      const late = await post(t.ownerKey, { multiplier: 2, duration: '1h', reason: 'x' });
      expect(late.body).toMatchObject({
        error: 'BOOST_COOLDOWN',
        details: { nextAllowedAt: '2026-05-21T10:20:00.000Z' },
      });
      expect(await t.context.db.prisma.rateLimitBoost.count()).toBe(2);
    });
  });
});

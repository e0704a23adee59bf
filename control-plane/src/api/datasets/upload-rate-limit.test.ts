import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TIER_LIMITS } from '../../ratelimit/policy.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

/**
 * The upload routes authenticate themselves (an upload token is not an API key), and are counted by the
 * rate limiter all the same: with a token against the dataset's account, with a key against the key's.
 */
describe('dataset upload routes are rate limited', () => {
  let t: TestApp;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-upload-rate-'));
    t = await createTestApp({
      clock: new ManualClock(new Date('2026-05-01T10:20:00Z')),
      env: { ANVIL_DATA_DIR: dataDir },
    });
    await t.context.db.prisma.account.update({ where: { id: t.accountId }, data: { tier: 'free' } });
    await t.context.keys.invalidate();
  });
  afterAll(async () => {
    await t.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('answers 429 once the account has spent its write limit, token or key', async () => {
    const created = await t.app.inject({
      method: 'POST',
      url: '/v2/training/datasets',
      headers: t.auth(),
      payload: { name: 'limited', type: 'text', format: 'jsonl' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id, uploadToken } = created.json();
    const abort = (bearer: string) =>
      t.app.inject({
        method: 'DELETE',
        url: `/v2/training/uploads/datasets/${id}/multipart/mpu_nope`,
        headers: { authorization: `Bearer ${bearer}` },
      });
    const statuses: number[] = [];
    const limit = TIER_LIMITS.free.write;
    for (let i = 0; i < limit; i++)
      statuses.push((await abort(i % 2 === 0 ? uploadToken : t.ownerKey)).statusCode);
    // The creation counted one write; the rest of the window's writes get the route's own answer (400:
    // not an upload id), then the limit answers.
    expect(statuses.slice(0, limit - 1)).toEqual(Array(limit - 1).fill(400));
    expect(statuses[limit - 1]).toBe(429);
    for (const bearer of [uploadToken, t.ownerKey]) {
      const refused = await abort(bearer);
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ error: 'RATE_LIMITED' });
      expect(refused.headers['retry-after']).toBeDefined();
    }
  });
});

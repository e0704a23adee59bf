import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Endpoint } from '../db/generated/client.ts';
import { endpointRow } from '../testing/endpoint-row.ts';
import { createTestDatabase, ManualClock, type TestDatabase } from '../testing/index.ts';
import { JobQueue, MAX_ATTEMPTS } from './jobs.ts';

/** The durable queue on a real database (PGlite, and PostgreSQL in the postgres project). */
describe('endpoint job queue', () => {
  let database: TestDatabase;
  let clock: ManualClock;
  let queue: JobQueue;
  let endpoint: Endpoint;
  const by = { accountId: '', userId: null, keyId: null };

  beforeEach(async () => {
    database = await createTestDatabase();
    clock = new ManualClock(new Date('2026-03-01T00:00:00Z'));
    queue = new JobQueue(database.db, clock);
    const prisma = database.db.prisma;
    const accountId = newId('acc');
    by.accountId = accountId;
    await prisma.account.create({ data: { id: accountId, name: 'a' } });
    await prisma.gpuPrice.create({ data: { gpuType: 'H100', hourlyRate: 3.6 } });
    endpoint = await prisma.endpoint.create({
      data: endpointRow({ accountId, gpuCount: 2, workerCount: 2, maxConcurrency: 2 }),
    });
    for (const [id, status] of [
      ['wl_a', 'ready'],
      ['wl_b', 'ready'],
      ['wl_c', 'starting'],
    ] as const) {
      await prisma.endpointWorker.create({
        data: { id, endpointId: endpoint.id, accountId, hostId: 'host_x', configVersion: 1, status },
      });
    }
  });
  afterEach(async () => database.drop());

  const worker = (id: string) => ({ id, endpointId: endpoint.id, maxConcurrency: 2 });
  const submit = async (n: number) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i += 1) {
      ids.push((await queue.submit(endpoint, by, { input: { i } })).id);
      clock.advance(1);
    }
    return ids;
  };

  it('claims the oldest jobs up to the worker’s free slots, never for a worker that is not ready', async () => {
    const ids = await submit(5);
    expect(await queue.claim(worker('wl_c'), 'r1', 10_000)).toEqual([]);
    const first = await queue.claim(worker('wl_a'), 'r1', 10_000);
    expect(first.map((j) => j.id)).toEqual(ids.slice(0, 2));
    expect(first[0]).toMatchObject({
      status: 'IN_PROGRESS',
      workerId: 'wl_a',
      dispatchedBy: 'r1',
      attempts: 1,
    });
    expect(await queue.claim(worker('wl_a'), 'r1', 10_000)).toEqual([]);
    expect((await queue.claim(worker('wl_b'), 'r2', 10_000)).map((j) => j.id)).toEqual(ids.slice(2, 4));
    expect(await queue.counts(endpoint.id)).toEqual({ queued: 1, inProgress: 4 });
  });

  it('never gives one job twice or a worker more than its slots when claims race', async () => {
    await submit(12);
    const claims = await Promise.all(
      Array.from({ length: 8 }, (_, i) => queue.claim(worker(i % 2 ? 'wl_a' : 'wl_b'), `r${i}`, 10_000)),
    );
    const all = claims.flat().map((j) => j.id);
    expect(new Set(all).size).toBe(all.length);
    const rows = await database.db.prisma.endpointJob.groupBy({
      by: ['workerId'],
      where: { status: 'IN_PROGRESS' },
      _count: true,
    });
    for (const row of rows) expect(row._count).toBeLessThanOrEqual(2);
    expect(all.length).toBe(4);
  });

  it('finishes once, records the run, and ignores an answer after a cancel', async () => {
    const [a, b] = await submit(2);
    await queue.claim(worker('wl_a'), 'r1', 10_000);
    clock.advance(1_800_000);
    const done = await queue.finish(a!, 'wl_a', { status: 'COMPLETED', output: { ok: true } });
    expect(done).toMatchObject({ status: 'COMPLETED', output: { ok: true } });
    expect(await queue.finish(a!, 'wl_a', { status: 'FAILED', error: 'late' })).toBeNull();
    const usage = await database.db.prisma.usageRecord.findFirstOrThrow({
      where: { resourceId: endpoint.id },
    });
    // Half an hour on 2 GPUs, cost 0: the worker's uptime bills those GPU-seconds.
    expect(usage).toMatchObject({ kind: 'execution', quantity: 1, gpuHours: 1, cost: 0, gpuCount: 2 });
    expect(usage.metadata).toMatchObject({ jobId: a, success: true, durationMs: 1_800_000 });
    expect((await queue.cancel(endpoint.id, b!)).status).toBe('CANCELLED');
    expect(await queue.finish(b!, 'wl_a', { status: 'COMPLETED', output: 1 })).toBeNull();
    expect((await queue.get(b!))?.status).toBe('CANCELLED');
  });

  it('queues a job again when its worker or replica goes away, and fails it after MAX_ATTEMPTS', async () => {
    const [a] = await submit(1);
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt += 1) {
      const [claimed] = await queue.claim(worker('wl_a'), 'r1', 10_000);
      expect(claimed?.attempts).toBe(attempt);
      const status = await queue.requeue(a!, 'connection reset', 'wl_a');
      expect(status).toBe(attempt < MAX_ATTEMPTS ? 'IN_QUEUE' : 'FAILED');
    }
    expect((await queue.get(a!))?.error).toMatch(/worker lost 3 times: connection reset/);
    const [b] = await submit(1);
    await queue.claim(worker('wl_a'), 'r1', 10_000);
    // Never reached the worker: not an attempt.
    expect(await queue.requeue(b!, 'tunnel refused', 'wl_a', false)).toBe('IN_QUEUE');
    expect((await queue.get(b!))?.attempts).toBe(0);
    await queue.claim(worker('wl_a'), 'r1', 10_000);
    clock.advance(10_001);
    expect(await queue.expireLeases()).toBe(1);
    expect((await queue.get(b!))?.status).toBe('IN_QUEUE');
    await queue.claim(worker('wl_a'), 'r2', 10_000);
    expect(await queue.renew([b!], 'r1', 10_000)).toEqual(new Set());
    expect(await queue.renew([b!], 'r2', 10_000)).toEqual(new Set([b]));
    expect(await queue.releaseReplica('r2')).toBe(1);
    expect((await queue.get(b!))?.status).toBe('IN_QUEUE');
  });

  it('times out jobs past their ttl, retries failed ones, and hides them once the ttl passed', async () => {
    const short = await queue.submit(endpoint, by, { input: 1, policy: { ttl: 10_000 } });
    clock.advance(10_000);
    expect(await queue.expireTtl()).toEqual([short.id]);
    const timedOut = await queue.find(endpoint.id, short.id).catch((e: { code: string }) => e.code);
    expect(timedOut).toBe('JOB_NOT_FOUND');
    const [a] = await submit(1);
    await queue.claim(worker('wl_a'), 'r1', 10_000);
    await queue.finish(a!, 'wl_a', { status: 'FAILED', error: 'boom' });
    await expect(queue.retry(endpoint.id, short.id)).rejects.toMatchObject({ code: 'JOB_NOT_FOUND' });
    const retried = await queue.retry(endpoint.id, a!);
    expect(retried).toMatchObject({ status: 'IN_QUEUE', retries: 1, error: null, attempts: 0 });
    await expect(queue.retry(endpoint.id, a!)).rejects.toMatchObject({ code: 'JOB_NOT_RETRYABLE' });
    expect(await queue.purge(endpoint.id)).toBe(1);
  });

  it('hands stream chunks out once each, or from an offset', async () => {
    const [a] = await submit(1);
    await queue.claim(worker('wl_a'), 'r1', 10_000);
    for (const part of ['x', 'y', 'z']) await queue.appendChunk(a!, part);
    expect((await queue.readStream(a!, null)).map((c) => c.output)).toEqual(['x', 'y', 'z']);
    expect(await queue.readStream(a!, null)).toEqual([]);
    await queue.appendChunk(a!, 'w');
    expect((await queue.readStream(a!, null)).map((c) => c.seq)).toEqual([4]);
    expect((await queue.readStream(a!, 1)).map((c) => c.output)).toEqual(['y', 'z', 'w']);
  });
});

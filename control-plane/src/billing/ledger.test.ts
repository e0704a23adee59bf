import { newId } from '@anvil/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../testing/index.ts';
import { recordGpuSession, sessionCost } from './ledger.ts';

describe('the GPU usage ledger (recordGpuSession)', () => {
  let database: TestDatabase;
  let accountId: string;

  beforeEach(async () => {
    database = await createTestDatabase();
    accountId = newId('acc');
    await database.db.prisma.account.create({ data: { id: accountId, name: 'A' } });
  });
  afterEach(async () => database.drop());

  const startedAt = new Date('2026-11-24T10:00:00Z');

  it('writes one gpu_compute record per closed session: hours, GPU-hours, cost at its rate, metadata', async () => {
    const closed = await database.db.prisma.$transaction((tx) =>
      recordGpuSession(tx, {
        accountId,
        userId: null,
        resourceType: 'training_job',
        resourceId: 'job_1',
        gpuType: 'H100',
        gpuCount: 4,
        hourlyRate: 12,
        startedAt,
        endedAt: new Date(startedAt.getTime() + 90 * 60_000),
        reason: 'completed',
        details: { host_id: 'host_1' },
      }),
    );
    expect(closed).toEqual({
      startedAt,
      endedAt: new Date('2026-11-24T11:30:00Z'),
      hours: 1.5,
      cost: 18,
    });
    const [record, ...others] = await database.db.prisma.usageRecord.findMany({ where: { accountId } });
    expect(others).toEqual([]);
    expect(record).toMatchObject({
      resourceType: 'training_job',
      resourceId: 'job_1',
      kind: 'gpu_compute',
      gpuType: 'H100',
      gpuCount: 4,
      quantity: 1.5,
      unit: 'hours',
      gpuHours: 6,
      cost: 18,
      currency: 'USD',
      startedAt,
      metadata: { reason: 'completed', hourly_rate: 12, host_id: 'host_1' },
    });
  });

  it('bills nothing for an end before the start (a skewed clock, a retried step)', async () => {
    const closed = await database.db.prisma.$transaction((tx) =>
      recordGpuSession(tx, {
        accountId,
        userId: null,
        resourceType: 'cluster',
        resourceId: 'cluster_1',
        gpuType: 'H100',
        gpuCount: 1,
        hourlyRate: 3,
        startedAt,
        endedAt: new Date(startedAt.getTime() - 60_000),
        reason: 'stopped',
      }),
    );
    expect(closed).toEqual({ startedAt, endedAt: startedAt, hours: 0, cost: 0 });
    expect(sessionCost(3, 20 * 60_000)).toBe(1);
  });
});

import { newId } from '@anvil/shared';
import type { MetricSample } from '@anvil/shared/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeSession } from '../../billing/sessions.ts';
import { call } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

const NOW = new Date('2026-11-24T12:00:00Z');
const HOST = 'host_gpuhistory';

function gpuSample(at: string, uuid: string, index: number, util: number, temp: number): MetricSample {
  const gib = 1024 ** 3;
  return {
    at: Date.parse(at),
    host: null,
    containers: [],
    gpus: [
      {
        index,
        uuid,
        utilizationPercent: util,
        memoryUtilizationPercent: null,
        memoryUsedBytes: 20 * gib,
        memoryTotalBytes: 80 * gib,
        temperatureC: temp,
        powerWatts: null,
        smClockMhz: null,
        memoryClockMhz: null,
        processes: [],
      },
    ],
  };
}

/**
 * GPU utilisation history of GET /v2/accounts/usage/gpu comes from the stored GPU samples of the GPUs a
 * session held, for closed sessions too (the session's record names them), from raw samples until they
 * are rolled up and from the rollups after, never counted twice; null where no sample exists.
 */
describe('usage GPU report: utilisation from stored samples', () => {
  let t: TestApp;
  let clock: ManualClock;

  beforeAll(async () => {
    clock = new ManualClock(NOW);
    t = await createTestApp({ clock, env: { ANVIL_USAGE_ALERT_SECONDS: '0' } });
    const prisma = t.context.db.prisma;
    await prisma.host.create({
      data: {
        id: HOST,
        name: 'gpu-h',
        hostname: 'gpu-h.internal',
        credentialHash: 'e'.repeat(64),
        inventory: {
          gpus: {
            simulated: true,
            devices: [
              { index: 0, uuid: 'GPU-session' },
              { index: 1, uuid: 'GPU-neighbour' },
            ],
          },
        },
        simulated: true,
        gpuCount: 2,
      },
    });
    // Yesterday 10:00-12:00 a cluster held GPU index 0; its session closed and the GPU was released.
    const cluster = await prisma.cluster.create({
      data: {
        id: newId('cluster'),
        accountId: t.accountId,
        ownerId: t.userId,
        name: 'trainer',
        status: 'running',
        cpuCores: 8,
        memoryGb: 32,
        storageGb: 100,
        dockerImage: 'anvil-test/busybox:latest',
        command: [],
        gpuType: 'H100',
        gpuCount: 1,
        hourlyRate: 2,
        hostId: HOST,
        gpuIndices: [0],
        sessionStartedAt: new Date('2026-11-23T10:00:00Z'),
      },
    });
    await prisma.$transaction((tx) => closeSession(tx, cluster, new Date('2026-11-23T12:00:00Z'), 'stopped'));
    await prisma.cluster.update({
      where: { id: cluster.id },
      data: { status: 'stopped', hostId: null, gpuIndices: [] },
    });
    // An H100 session of another cluster with no GPU named (recorded before GPUs were kept): no samples.
    await prisma.usageRecord.create({
      data: {
        id: newId('use'),
        accountId: t.accountId,
        resourceType: 'cluster',
        resourceId: 'cluster_old',
        kind: 'gpu_compute',
        gpuType: 'A100',
        gpuCount: 1,
        quantity: 1,
        unit: 'hours',
        gpuHours: 1,
        cost: 1,
        startedAt: new Date('2026-11-22T10:00:00Z'),
        endedAt: new Date('2026-11-22T11:00:00Z'),
      },
    });
    const telemetry = t.context.fleet.telemetry;
    telemetry.ingestMetrics(
      HOST,
      [
        gpuSample('2026-11-23T10:30:00Z', 'GPU-session', 0, 40, 60),
        gpuSample('2026-11-23T11:30:00Z', 'GPU-session', 0, 60, 70),
        // After the session (the GPU served someone else) and the neighbouring GPU: not this session's.
        gpuSample('2026-11-23T13:00:00Z', 'GPU-session', 0, 100, 90),
        gpuSample('2026-11-23T11:00:00Z', 'GPU-neighbour', 1, 5, 30),
      ],
      0,
    );
    await telemetry.flush();
  });
  afterAll(async () => t?.close());

  const report = async () => {
    const r = await call(t, { url: '/v2/accounts/usage/gpu?period=7d&includeMetrics=true' });
    expect(r.statusCode, r.body).toBe(200);
    return r.json() as {
      gpuUsage: {
        gpuType: string;
        averageUtilization: number | null;
        peakUtilization: number | null;
        performance: { averageMemoryUsage: number | null; averageTemperature: number | null };
        usage: { date: string; utilization: number | null; hours: number }[];
      }[];
    };
  };

  const expectHistory = async () => {
    const { gpuUsage } = await report();
    const h100 = gpuUsage.find((g) => g.gpuType === 'H100')!;
    expect(h100).toMatchObject({
      averageUtilization: 50,
      peakUtilization: 60,
      performance: { averageMemoryUsage: 25, averageTemperature: 65 },
    });
    const day = (date: string) => h100.usage.find((u) => u.date === date);
    expect(day('2026-11-23T00:00:00.000Z')).toMatchObject({ hours: 2, utilization: 50 });
    expect(day('2026-11-24T00:00:00.000Z')).toMatchObject({ hours: 0, utilization: null });
    // A session whose GPUs are unknown has no samples: null, not a made-up figure.
    const a100 = gpuUsage.find((g) => g.gpuType === 'A100')!;
    expect(a100).toMatchObject({ averageUtilization: null, peakUtilization: null });
    expect(a100.usage.every((u) => u.utilization === null)).toBe(true);
  };

  it('averages the closed session’s own GPU samples from the raw samples', async () => {
    await expectHistory();
  });

  it('gives the same figures once the samples are rolled up (never counted twice)', async () => {
    // Rollups take samples received more than a few seconds ago.
    clock.advance(60_000);
    expect(await t.context.fleet.telemetry.rollup()).toBeGreaterThan(0);
    const rolled = await t.context.db.prisma.metricRollup.count({ where: { hostId: HOST } });
    expect(rolled).toBe(4);
    await expectHistory();
  });
});

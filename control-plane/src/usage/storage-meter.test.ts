import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, ManualClock, type TestApp } from '../testing/index.ts';
import { workloadSpecInput } from '../testing/workload-spec.ts';
import { StorageMeter } from './storage-meter.ts';

const HOUR = 3_600_000;

/** Stored dataset bytes become GB-hour records that tile time: no hour billed twice or skipped. */
describe('storage metering', () => {
  let t: TestApp;
  let clock: ManualClock;
  let dataDir: string;
  let meter: StorageMeter;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-storage-meter-'));
    clock = new ManualClock(new Date('2026-11-26T10:00:00Z'));
    // No timer: the test runs the passes.
    t = await createTestApp({ clock, env: { ANVIL_DATA_DIR: dataDir, ANVIL_STORAGE_METER_SECONDS: '0' } });
    meter = new StorageMeter({
      db: t.database.db,
      clock,
      pricePerGbHour: 0.1,
      intervalSeconds: 0,
      onError: (error) => {
        throw error;
      },
    });
  });

  afterAll(async () => {
    await t?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function upload(datasetId: string, token: string, content: string): Promise<void> {
    const res = await t.app.inject({
      method: 'PUT',
      url: `/v2/training/uploads/datasets/${datasetId}`,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      payload: Buffer.from(content),
    });
    expect(res.statusCode, res.body).toBe(202);
    await t.context.datasets.processor.idle();
  }

  const records = () =>
    t.database.db.prisma.usageRecord.findMany({ where: { kind: 'storage' }, orderBy: { startedAt: 'asc' } });

  it('bills each version from when it was stored, then each pass from where the last one ended', async () => {
    const created = await t.app.inject({
      method: 'POST',
      url: '/v2/training/datasets',
      headers: t.auth(),
      payload: { name: 'stored', type: 'text', format: 'jsonl' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const dataset = created.json() as { id: string; uploadToken: string };
    const first = '{"text":"a"}\n'.repeat(1000);
    await upload(dataset.id, dataset.uploadToken, first);
    clock.advance(2 * HOUR);
    const second = '{"text":"bb"}\n'.repeat(500);
    await upload(dataset.id, t.ownerKey, second);
    clock.advance(HOUR);

    expect(await meter.pass()).toBe(1);
    const [one] = await records();
    // The first version three hours, the second one hour.
    const expected = (first.length / 1e9) * 3 + (second.length / 1e9) * 1;
    expect(one).toMatchObject({
      accountId: t.accountId,
      resourceType: 'dataset',
      resourceId: dataset.id,
      unit: 'GB-hours',
      startedAt: new Date('2026-11-26T10:00:00Z'),
      endedAt: new Date('2026-11-26T13:00:00Z'),
      metadata: { bytes: first.length + second.length, versions: 2 },
    });
    expect(one!.quantity).toBeCloseTo(expected, 12);
    expect(one!.cost).toBeCloseTo(expected * 0.1, 12);

    // No time passed: nothing more to bill.
    expect(await meter.pass()).toBe(0);
    clock.advance(HOUR / 2);
    expect(await meter.pass()).toBe(1);
    const [, two] = await records();
    expect(two!.startedAt).toEqual(one!.endedAt);
    expect(two!.quantity).toBeCloseTo(((first.length + second.length) / 1e9) * 0.5, 12);

    // Deleted: no longer billed.
    const deleted = await t.app.inject({
      method: 'DELETE',
      url: `/v2/training/datasets/${dataset.id}`,
      headers: t.auth(),
    });
    expect(deleted.statusCode, deleted.body).toBeLessThan(300);
    clock.advance(HOUR);
    expect(await meter.pass()).toBe(0);
  });

  it('bills a workload disk from the agent’s samples to its cluster, each figure held until the next', async () => {
    const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
    const host = await t.context.fleet.hosts.register({ joinToken: value, hostname: 'h', agentVersion: 't' });
    if (!host.ok) throw new Error(host.reason);
    const workload = await t.context.fleet.workloads.create({
      hostId: host.hostId,
      kind: 'cluster',
      ownerAccountId: t.accountId,
      spec: workloadSpecInput({
        image: 'x',
        command: null,
        labels: { 'anvil.cluster': 'cluster_disk', 'anvil.account': t.accountId },
      }),
    });
    const t0 = clock.now().getTime();
    const sample = (offsetMs: number, diskUsedBytes: number) =>
      t.database.db.prisma.metricSample.create({
        data: {
          hostId: host.hostId,
          kind: 'container',
          series: workload.id,
          at: new Date(t0 + offsetMs),
          data: { diskUsedBytes, cpuPercent: 1 },
          receivedAt: new Date(t0 + offsetMs),
        },
      });
    await sample(0, 2e9);
    await sample(60_000, 4e9);
    // The container stopped reporting: its last figure counts five minutes, no more.
    clock.advance(HOUR);
    expect(await meter.pass()).toBe(1);
    const [disk] = await t.database.db.prisma.usageRecord.findMany({
      where: { kind: 'storage', resourceId: 'cluster_disk' },
    });
    expect(disk).toMatchObject({
      accountId: t.accountId,
      resourceType: 'cluster',
      unit: 'GB-hours',
      metadata: { source: 'workload_disk', peakBytes: 4e9 },
      startedAt: new Date(t0),
    });
    // 2 GB for one minute, then 4 GB for five.
    expect(disk!.quantity).toBeCloseTo(2 / 60 + (4 * 5) / 60, 12);

    // Later samples are billed from where the record ended, never twice.
    await sample(HOUR + 60_000, 1e9);
    clock.advance(10 * 60_000);
    expect(await meter.pass()).toBe(1);
    const later = await t.database.db.prisma.usageRecord.findMany({
      where: { kind: 'storage', resourceId: 'cluster_disk' },
      orderBy: { endedAt: 'asc' },
    });
    expect(later).toHaveLength(2);
    expect(later[1]!.quantity).toBeCloseTo((1 * 5) / 60, 12);
  });

  it('bills a snapshot image on its host to the cluster’s account by its own bytes, also after the cluster is gone', async () => {
    const register = async (hostname: string) => {
      const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
      const host = await t.context.fleet.hosts.register({ joinToken: value, hostname, agentVersion: 't' });
      if (!host.ok) throw new Error(host.reason);
      return host.hostId;
    };
    const [hostA, hostB] = [await register('snap-a'), await register('snap-b')];
    const workload = await t.context.fleet.workloads.create({
      hostId: hostA,
      kind: 'cluster',
      ownerAccountId: t.accountId,
      spec: workloadSpecInput({ image: 'x', command: null, labels: { 'anvil.account': t.accountId } }),
    });
    const repository = `anvil-snapshots/${t.accountId}/${workload.id}`;
    const image = (imageId: string, repo: string, ownBytes: number) => ({
      imageId,
      repository: repo,
      workloadId: workload.id,
      sizeBytes: ownBytes + 5e9,
      ownBytes,
    });
    const t0 = clock.now().getTime();
    // Through ingestion, as the agent's metric_batch arrives: listings a minute apart.
    const listing = (offsetMs: number, hostId: string, snapshots: ReturnType<typeof image>[]) =>
      t.context.fleet.telemetry.ingestMetrics(
        hostId,
        [{ at: t0 + offsetMs, host: null, gpus: [], containers: [], snapshots }],
        0,
      );
    listing(0, hostA, [image('sha256:own', repository, 3e9)]);
    listing(60_000, hostA, [image('sha256:own', repository, 3e9)]);
    // Not billed: the same repository from a host the cluster never ran on, and a repository naming
    // another account than the workload's.
    listing(0, hostB, [image('sha256:elsewhere', repository, 9e9)]);
    listing(0, hostA, [image('sha256:forged', `anvil-snapshots/acc_other/${workload.id}`, 9e9)]);
    await t.context.fleet.telemetry.flush();
    // The workload is deleted (the cluster with it): its snapshot stays on the host and stays billed.
    await t.database.db.prisma.workload.update({ where: { id: workload.id }, data: { desired: 'deleted' } });
    clock.advance(HOUR);

    expect(await meter.pass()).toBeGreaterThanOrEqual(1);
    const snapshots = await t.database.db.prisma.usageRecord.findMany({
      where: { kind: 'storage', resourceType: 'snapshot' },
    });
    expect(snapshots).toHaveLength(1);
    expect(snapshots[0]).toMatchObject({
      accountId: t.accountId,
      resourceId: 'sha256:own',
      unit: 'GB-hours',
      startedAt: new Date(t0),
      metadata: { source: 'snapshot', clusterId: workload.id, hostId: hostA, peakBytes: 3e9 },
    });
    // 3 GB for the minute to the second listing, then five minutes more: the base image is not billed.
    expect(snapshots[0]!.quantity).toBeCloseTo((3 * 6) / 60, 12);
    expect(snapshots[0]!.cost).toBeCloseTo(((3 * 6) / 60) * 0.1, 12);
  });
});

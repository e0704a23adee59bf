import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';
import { StorageMeter } from '../../usage/storage-meter.ts';
import { parseReport } from '../contract.ts';

const HOUR = 3_600_000;

/** Artifact reports become rows; their measured bytes are billed as storage once the job's session ended. */
describe('training artifacts', () => {
  let t: TestApp;
  const clock = new ManualClock(new Date('2026-11-26T10:00:00Z'));
  beforeAll(async () => {
    t = await createTestApp({ clock, env: { ANVIL_STORAGE_METER_SECONDS: '0' } });
  });
  afterAll(() => t?.close());

  it('parses artifact reports inside the workspace and ignores paths that leave it', () => {
    expect(parseReport('ANVIL_REPORT {"type":"artifact","path":"out/model.bin","name":"model"}')).toEqual({
      type: 'artifact',
      path: 'out/model.bin',
      name: 'model',
    });
    expect(parseReport('ANVIL_REPORT {"type":"artifact","path":"/anvil/checkpoints/a.bin"}')).toEqual({
      type: 'artifact',
      path: 'a.bin',
      name: 'a.bin',
    });
    for (const path of ['../x', 'a/../../x', '/etc/passwd', './a', 'a//b', '', 'a b']) {
      expect(parseReport(`ANVIL_REPORT ${JSON.stringify({ type: 'artifact', path })}`), path).toBeNull();
    }
  });

  async function createJob(status: string, sessionStartedAt: Date | null = null): Promise<string> {
    const db = t.context.db;
    const account = await db.prisma.account.findFirstOrThrow();
    const user = await db.prisma.user.findFirstOrThrow({ where: { accountId: account.id } });
    const id = newId('job');
    await db.prisma.trainingJob.create({
      data: {
        id,
        accountId: account.id,
        createdById: user.id,
        name: 'r',
        modelType: 'custom',
        config: {},
        gpuType: 'h100',
        image: 'busybox',
        status,
        sessionStartedAt,
      },
    });
    return id;
  }

  it('stores artifacts and checkpoints read from rank 0 lines, one artifact per path', async () => {
    const db = t.context.db;
    const jobId = await createJob('running');
    const lines = [
      '{"type":"artifact","path":"model.bin","name":"first"}',
      '{"type":"checkpoint","path":"step-1","step":1}',
      '{"type":"artifact","path":"model.bin","name":"second"}',
      '{"type":"artifact","path":"../escape"}',
    ];
    for (const line of lines) {
      await db.sql.query(
        `INSERT INTO log_entries (host_id, workload_id, container_id, stream, ts, at, line, received_at)
         VALUES ('host_x', $1, 'c', 'stdout', '', now(), $2, now())`,
        [`${jobId}-r0`, `ANVIL_REPORT ${line}`],
      );
    }
    // The supervisor's own pass may read them first: either way each report is stored once.
    await t.context.training.reports.drain(jobId);
    const rows = await db.prisma.trainingArtifact.findMany({
      where: { jobId },
      orderBy: { createdAt: 'asc' },
    });
    expect(rows.map((r) => [r.type, r.name, r.path, r.checkpointId !== null])).toEqual([
      ['artifact', 'second', 'model.bin', false],
      ['checkpoint', 'step-1', 'step-1', true],
    ]);
  });

  it("bills measured bytes from the report or the session's end to the deletion, never while a session is open", async () => {
    const db = t.context.db;
    const meter = new StorageMeter({
      db,
      clock,
      pricePerGbHour: 0.1,
      intervalSeconds: 0,
      onError: (error) => {
        throw error;
      },
    });
    const t0 = clock.now().getTime();
    const ended = await createJob('completed');
    // An open session is what counts (status stopped keeps the supervisor's passes off this row).
    const running = await createJob('stopped', new Date(t0 - HOUR));
    const account = await db.prisma.trainingJob.findUniqueOrThrow({ where: { id: ended } });
    await db.prisma.usageRecord.create({
      data: {
        id: newId('use'),
        accountId: account.accountId,
        resourceType: 'training_job',
        resourceId: ended,
        kind: 'gpu_compute',
        quantity: 1,
        unit: 'hours',
        cost: 1,
        startedAt: new Date(t0 - 2 * HOUR),
        endedAt: new Date(t0),
      },
    });
    const artifact = (jobId: string, at: number, bytes: number, deletedAt: number | null = null) =>
      db.prisma.trainingArtifact.create({
        data: {
          id: newId('art'),
          jobId,
          accountId: account.accountId,
          type: 'artifact',
          name: 'a',
          path: `a-${at}`,
          workloadId: `${jobId}-r0`,
          sizeBytes: BigInt(bytes),
          fileKind: 'file',
          measuredAt: new Date(at),
          createdAt: new Date(at),
          deletedAt: deletedAt === null ? null : new Date(deletedAt),
        },
      });
    await artifact(ended, t0 - HOUR, 1e9);
    await artifact(ended, t0 + HOUR, 2e9, t0 + 2 * HOUR);
    await artifact(running, t0 - HOUR, 5e9);
    const billed = async () =>
      (
        await db.prisma.usageRecord.findMany({ where: { kind: 'storage' }, orderBy: { endedAt: 'asc' } })
      ).filter((r) => (r.metadata as { source?: string }).source === 'training_artifacts');
    clock.advance(3 * HOUR);
    await meter.pass();
    clock.advance(HOUR);
    await meter.pass();
    const records = await billed();
    // 1 GB from the session's end (3 h) + 2 GB for the hour before its deletion; then 1 GB for the next hour.
    expect(records.map((r) => [r.resourceId, r.quantity, r.startedAt.getTime() - t0, r.metadata])).toEqual([
      [ended, 5, 0, { source: 'training_artifacts', bytes: 1e9, artifacts: 1 }],
      [ended, 1, 3 * HOUR, { source: 'training_artifacts', bytes: 1e9, artifacts: 1 }],
    ]);
    expect(records[0]!.cost).toBeCloseTo(0.5, 9);
  });
});

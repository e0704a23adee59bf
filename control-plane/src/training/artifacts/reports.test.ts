import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { parseReport } from '../contract.ts';

describe('artifact reports', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
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

  it('stores artifacts and checkpoints read from rank 0 lines, one artifact per path', async () => {
    const db = t.context.db;
    const account = await db.prisma.account.findFirstOrThrow();
    const user = await db.prisma.user.findFirstOrThrow({ where: { accountId: account.id } });
    const jobId = 'job_reports0000000000000';
    await db.prisma.trainingJob.create({
      data: {
        id: jobId,
        accountId: account.id,
        createdById: user.id,
        name: 'r',
        modelType: 'custom',
        config: {},
        gpuType: 'h100',
        image: 'busybox',
        status: 'running',
      },
    });
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
    expect(await t.context.training.reports.drain(jobId)).toBe(3);
    const rows = await db.prisma.trainingArtifact.findMany({
      where: { jobId },
      orderBy: { createdAt: 'asc' },
    });
    expect(rows.map((r) => [r.type, r.name, r.path, r.checkpointId !== null])).toEqual([
      ['artifact', 'second', 'model.bin', false],
      ['checkpoint', 'step-1', 'step-1', true],
    ]);
  });
});

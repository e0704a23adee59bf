import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../testing/index.ts';

describe('dataset storage quota', () => {
  let t: TestApp;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-dataset-quota-'));
    t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir, ANVIL_DATASET_QUOTA_BYTES: '100' } });
  });
  afterAll(async () => {
    await t.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  const create = async () =>
    (
      await t.app.inject({
        method: 'POST',
        url: '/v2/training/datasets',
        headers: t.auth(),
        payload: { name: 'q', type: 'text', format: 'jsonl' },
      })
    ).json();

  const put = (id: string, bytes: Buffer) =>
    t.app.inject({
      method: 'PUT',
      url: `/v2/training/uploads/datasets/${id}`,
      headers: { ...t.auth(), 'content-type': 'application/octet-stream' },
      payload: bytes,
    });

  it('counts stored versions and multipart reservations against the account quota', async () => {
    const first = await create();
    expect((await put(first.id, Buffer.from(`${'{"a":1}\n'.repeat(7)}`))).statusCode).toBe(202);
    const second = await create();
    const over = await put(second.id, Buffer.alloc(60, 0x61));
    expect(over.statusCode).toBe(403);
    expect(over.json()).toMatchObject({
      error: 'QUOTA_EXCEEDED',
      details: { currentUsage: 56, quotaLimit: 100, requestedSize: 60 },
    });
    expect(await t.context.db.prisma.datasetVersion.count({ where: { datasetId: second.id } })).toBe(0);
    const initiate = (size: number) =>
      t.app.inject({
        method: 'POST',
        url: `/v2/training/uploads/datasets/${second.id}/multipart`,
        headers: t.auth(),
        payload: { filename: 'x.jsonl', size },
      });
    expect((await initiate(40)).statusCode).toBe(201);
    expect((await initiate(10)).json()).toMatchObject({
      error: 'QUOTA_EXCEEDED',
      details: { currentUsage: 96 },
    });
    await t.context.datasets.processor.idle();
  });
});

describe('default dataset storage quota', () => {
  const GIB = 1024 ** 3;

  async function reserve(env: Record<string, string>, sizes: number[]): Promise<number[]> {
    const dataDir = await mkdtemp(join(tmpdir(), 'anvil-dataset-quota-default-'));
    const t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir, ...env } });
    try {
      const statuses: number[] = [];
      for (const size of sizes) {
        const dataset = await t.app.inject({
          method: 'POST',
          url: '/v2/training/datasets',
          headers: t.auth(),
          payload: { name: 'big', type: 'text', format: 'jsonl' },
        });
        // Multipart reservations count their declared size: no bytes need to be sent.
        const res = await t.app.inject({
          method: 'POST',
          url: `/v2/training/uploads/datasets/${dataset.json().id}/multipart`,
          headers: t.auth(),
          payload: { filename: 'big.jsonl', size },
        });
        if (res.statusCode === 403)
          expect(res.json()).toMatchObject({ error: 'QUOTA_EXCEEDED', details: { quotaLimit: 100 * GIB } });
        statuses.push(res.statusCode);
      }
      return statuses;
    } finally {
      await t.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  }

  it('holds every account to 100 GiB when the operator sets nothing, and to nothing when told unlimited', async () => {
    expect(await reserve({}, [40 * GIB, 40 * GIB, 40 * GIB])).toEqual([201, 201, 403]);
    expect(await reserve({ ANVIL_DATASET_QUOTA_BYTES: 'unlimited' }, [40 * GIB, 40 * GIB, 40 * GIB])).toEqual(
      [201, 201, 201],
    );
  });
});

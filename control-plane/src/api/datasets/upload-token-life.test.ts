import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMember, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

/**
 * An upload token acts for the member who created the dataset: it stops opening the dataset as soon as
 * the dataset is deleted or that member can no longer write datasets (suspended, removed, or moved to a
 * read-only role), for single PUTs and multipart calls alike.
 */
describe('dataset upload tokens die with the dataset and with their creator’s write access', () => {
  let t: TestApp;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'anvil-upload-token-'));
    t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir } });
  });
  afterAll(async () => {
    await t.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function datasetBy(member: TestMember): Promise<{ id: string; uploadToken: string }> {
    const res = await call(t, {
      method: 'POST',
      url: '/v2/training/datasets',
      key: member,
      payload: { name: 'tokened', type: 'text', format: 'jsonl' },
    });
    expect(res.statusCode, res.body).toBe(201);
    return res.json();
  }

  const put = (id: string, token: string) =>
    t.app.inject({
      method: 'PUT',
      url: `/v2/training/uploads/datasets/${id}`,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('{"text":"a"}\n'),
    });
  const initiate = (id: string, token: string) =>
    t.app.inject({
      method: 'POST',
      url: `/v2/training/uploads/datasets/${id}/multipart`,
      headers: { authorization: `Bearer ${token}` },
      payload: { filename: 'a.jsonl', size: 10 },
    });

  const changes: Array<[string, (member: TestMember) => Promise<unknown>]> = [
    [
      'suspended',
      (m) => t.context.db.prisma.user.update({ where: { id: m.userId }, data: { status: 'suspended' } }),
    ],
    [
      'removed',
      (m) => t.context.db.prisma.user.update({ where: { id: m.userId }, data: { status: 'removed' } }),
    ],
    [
      'made a viewer',
      (m) => t.context.db.prisma.user.update({ where: { id: m.userId }, data: { role: 'viewer' } }),
    ],
  ];

  it.each(changes)('refuses the token once its creator is %s', async (_name, change) => {
    const member = await addMember(t, { role: 'developer' });
    const dataset = await datasetBy(member);
    expect((await initiate(dataset.id, dataset.uploadToken)).statusCode).toBe(201);
    await change(member);
    for (const res of [
      await put(dataset.id, dataset.uploadToken),
      await initiate(dataset.id, dataset.uploadToken),
    ]) {
      expect(res.statusCode, res.body).toBe(401);
      expect(res.json()).toMatchObject({ error: 'UNAUTHORIZED', details: { datasetId: dataset.id } });
    }
    const row = await t.context.db.prisma.dataset.findUniqueOrThrow({ where: { id: dataset.id } });
    expect(row.currentVersionId).toBeNull();
  });

  it('refuses the token of a deleted dataset', async () => {
    const member = await addMember(t, { role: 'developer' });
    const dataset = await datasetBy(member);
    const deleted = await call(t, {
      method: 'DELETE',
      url: `/v2/training/datasets/${dataset.id}`,
      key: member,
    });
    expect(deleted.statusCode, deleted.body).toBe(200);
    const res = await put(dataset.id, dataset.uploadToken);
    expect(res.statusCode).toBe(401);
    expect(res.json()).toMatchObject({ error: 'UNAUTHORIZED' });
  });

  it('still opens the dataset while the creator may write', async () => {
    const member = await addMember(t, { role: 'developer' });
    const dataset = await datasetBy(member);
    expect((await put(dataset.id, dataset.uploadToken)).statusCode).toBe(202);
  });
});

import { call } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';

/**
 * A JSON Lines text dataset of the owner's, created, uploaded and processed: ready for a training job.
 * Returns its id.
 */
export async function uploadedDataset(t: TestApp, lines: Buffer | string, name = 'tiny'): Promise<string> {
  const created = await call(t, {
    method: 'POST',
    url: '/v2/training/datasets',
    payload: { name, type: 'text', format: 'jsonl' },
  });
  if (created.statusCode !== 201) throw new Error(`dataset: ${created.body}`);
  const { id, uploadToken } = created.json();
  const put = await t.app.inject({
    method: 'PUT',
    url: `/v2/training/uploads/datasets/${id}`,
    headers: { authorization: `Bearer ${uploadToken}`, 'content-type': 'application/octet-stream' },
    payload: Buffer.from(lines),
  });
  if (put.statusCode !== 202) throw new Error(`dataset upload: ${put.body}`);
  await t.context.datasets.processor.idle();
  return id;
}

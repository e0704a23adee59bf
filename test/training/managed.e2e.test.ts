import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, call, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';
import { startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerAvailable } from '../fixtures/images/docker.ts';

/** The recipe's entrypoint: checks what managed training promises it, then "trains" (exits 0). */
const RECIPE_SCRIPT = `
[ "$ANVIL_BASE_MODEL" = "acme/tiny-7b" ] && [ "$ANVIL_STRATEGY" = lora ] && [ "$ANVIL_RECIPE" = busybox-lora ] &&
[ "$ANVIL_MODEL_TYPE" = llm ] && [ "$ANVIL_HP_EPOCHS" = 2 ] && [ "$ANVIL_HP_LEARNING_RATE" = 0.001 ] &&
[ -s "$ANVIL_DATASET_FILE" ] && [ -d "$ANVIL_WEIGHTS_PATH" ] || { echo "managed env missing"; env; exit 7; }
echo "trained $ANVIL_BASE_MODEL with $ANVIL_STRATEGY"
`;

/**
 * Managed training on one real host: recipes map a spec-shaped request onto an image and entrypoint;
 * a request no recipe runs is refused.
 */
describe.skipIf(!dockerAvailable())('managed training', () => {
  let datasetsDir: string;
  let fleet: Awaited<ReturnType<typeof startClusterFleet>>;
  let t: TestApp;
  let mallory: TestMember;
  let datasetId: string;

  beforeAll(async () => {
    datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-managed-'));
    fleet = await startClusterFleet({ ANVIL_DATASETS_DIR: datasetsDir });
    t = fleet.t;
    mallory = await addAccount(t, 'Mallory');
    const created = await call(t, {
      method: 'POST',
      url: '/v2/training/datasets',
      payload: { name: 'tiny', type: 'text', format: 'jsonl' },
    });
    datasetId = created.json().id;
    await t.app.inject({
      method: 'PUT',
      url: `/v2/training/uploads/datasets/${datasetId}`,
      headers: {
        authorization: `Bearer ${created.json().uploadToken}`,
        'content-type': 'application/octet-stream',
      },
      payload: Buffer.from('{"text":"a"}\n'),
    });
    await t.context.datasets.processor.idle();
  }, 300_000);

  afterAll(async () => {
    await fleet?.close();
    await rm(datasetsDir, { recursive: true, force: true });
  });

  const get = async (id: string) => (await call(t, { url: `/v2/training/jobs/${id}` })).json();

  it('operators manage recipes; customers list them read-only', async () => {
    const created = await call(t, {
      method: 'POST',
      url: '/v2/admin/training-recipes',
      payload: {
        name: 'busybox-lora',
        modelType: 'llm',
        baseModel: 'acme/*',
        strategy: 'lora',
        image: BUSYBOX_IMAGE,
        command: ['sh', '-c', RECIPE_SCRIPT],
        weightsPath: '/bin',
      },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id;
    expect(id).toMatch(/^rcp_/);
    const again = await call(t, {
      method: 'POST',
      url: '/v2/admin/training-recipes',
      payload: { name: 'busybox-lora', image: BUSYBOX_IMAGE },
    });
    expect(again.statusCode).toBe(409);
    expect(again.json().error).toBe('TRAINING_RECIPE_EXISTS');
    const scratch = await call(t, {
      method: 'POST',
      url: '/v2/admin/training-recipes',
      payload: { name: 'scratch', image: 'x/y:1' },
    });
    const changed = await call(t, {
      method: 'PUT',
      url: `/v2/admin/training-recipes/${scratch.json().id}`,
      payload: { strategy: 'full', description: 'full fine-tune' },
    });
    expect(changed.statusCode, changed.body).toBe(200);
    expect([changed.json().strategy, changed.json().image]).toEqual(['full', 'x/y:1']);
    const deleted = await call(t, {
      method: 'DELETE',
      url: `/v2/admin/training-recipes/${scratch.json().id}`,
    });
    expect(deleted.statusCode).toBe(200);
    expect((await call(t, { url: `/v2/admin/training-recipes/${scratch.json().id}` })).statusCode).toBe(404);

    const listed = await call(t, { url: '/v2/training/recipes', key: mallory });
    expect(listed.statusCode, listed.body).toBe(200);
    expect(listed.json().recipes.map((r: { name: string }) => r.name)).toEqual(['busybox-lora']);
    const forbidden = await call(t, {
      method: 'POST',
      url: '/v2/admin/training-recipes',
      key: mallory,
      payload: { name: 'mine', image: BUSYBOX_IMAGE },
    });
    expect(forbidden.statusCode).toBe(403);
  });

  it('a spec-shaped job runs its recipe to completion', { timeout: 300_000 }, async () => {
    const r = await call(t, {
      method: 'POST',
      url: '/v2/training/jobs',
      payload: {
        name: 'managed',
        modelType: 'llm',
        datasetId,
        config: {
          baseModel: 'acme/tiny-7b',
          strategy: 'lora',
          training: { epochs: 2, learning_rate: 0.001 },
        },
      },
    });
    expect(r.statusCode, r.body).toBe(201);
    const job = await waitFor(
      'managed job finished',
      async () => {
        const j = await get(r.json().id);
        return ['completed', 'failed'].includes(j.status) ? j : null;
      },
      240_000,
    );
    expect(job.status, job.statusReason).toBe('completed');
    const row = await t.context.db.prisma.trainingJob.findUniqueOrThrow({ where: { id: job.id } });
    expect(row.image).toBe(BUSYBOX_IMAGE);
    expect((row.config as { recipe: { name: string } }).recipe.name).toBe('busybox-lora');
  });

  it('a spec-shaped job no recipe runs is refused with what exists, and nothing is kept', async () => {
    const before = await t.context.db.prisma.trainingJob.count();
    for (const payload of [
      { name: 'nope', modelType: 'llm', datasetId, config: { baseModel: 'other/model', strategy: 'lora' } },
      { name: 'nope', modelConfig: { baseModel: 'acme/x' }, datasetConfig: { datasetId } },
    ]) {
      const r = await call(t, { method: 'POST', url: '/v2/training/jobs', payload });
      expect(r.statusCode, r.body).toBe(422);
      expect(r.json().error).toBe('NO_TRAINING_RECIPE');
      expect(r.json().details.available.map((a: { name: string }) => a.name)).toEqual(['busybox-lora']);
    }
    expect(await t.context.db.prisma.trainingJob.count()).toBe(before);
  });
});

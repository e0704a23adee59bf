import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../control-plane/src/logger.ts';
import { addAccount, call, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';
import { startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { uploadedDataset } from './datasets.ts';
import { TRAINER_SCRIPT } from './trainer.ts';

/** The recipe's entrypoint: checks what managed training promises it, then "trains" (exits 0). */
const RECIPE_SCRIPT = `
[ "$ANVIL_BASE_MODEL" = "acme/tiny-7b" ] && [ "$ANVIL_STRATEGY" = lora ] && [ "$ANVIL_RECIPE" = busybox-lora ] &&
[ "$ANVIL_MODEL_TYPE" = llm ] && [ "$ANVIL_HP_EPOCHS" = 2 ] && [ "$ANVIL_HP_LEARNING_RATE" = 0.001 ] &&
[ -s "$ANVIL_DATASET_FILE" ] && [ -d "$ANVIL_WEIGHTS_PATH" ] || { echo "managed env missing"; env; exit 7; }
echo "trained $ANVIL_BASE_MODEL with $ANVIL_STRATEGY"
`;

/**
 * Managed training on one real host (2 simulated GPUs): recipes map a spec-shaped request onto an image
 * and entrypoint, a request no recipe runs is refused; a high-priority job preempts a low-priority one,
 * which resumes from its checkpoint afterwards.
 */
describe.skipIf(!dockerOrFail('test/training/managed.e2e.test.ts'))('managed training', () => {
  let datasetsDir: string;
  let fleet: Awaited<ReturnType<typeof startClusterFleet>>;
  let t: TestApp;
  let mallory: TestMember;
  let datasetId: string;
  /** The control plane's warnings and errors. */
  const warnings: string[] = [];

  beforeAll(async () => {
    datasetsDir = await mkdtemp(join(tmpdir(), 'anvil-managed-'));
    const sink = new Writable({
      write(chunk, _encoding, done) {
        warnings.push(String(chunk));
        done();
      },
    });
    fleet = await startClusterFleet(
      { ANVIL_DATASETS_DIR: datasetsDir },
      { controlPlane: createLogger('warn', sink) },
    );
    t = fleet.t;
    mallory = await addAccount(t, 'Mallory');
    datasetId = await uploadedDataset(t, '{"text":"a"}\n');
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

  it('a high-priority job preempts a low one, which checkpoints, waits and resumes from its checkpoint', {
    timeout: 500_000,
  }, async () => {
    const create = async (
      name: string,
      priority: string,
      gpus: number,
      parameters: object,
      epochs: number,
    ) => {
      const r = await call(t, {
        method: 'POST',
        url: '/v2/training/jobs',
        payload: {
          name,
          modelType: 'custom',
          datasetId,
          priority,
          config: {
            image: BUSYBOX_IMAGE,
            command: ['sh', '-c', TRAINER_SCRIPT],
            gpusPerWorker: gpus,
            training: { epochs, learning_rate: 0.01 },
            parameters,
          },
        },
      });
      expect(r.statusCode, r.body).toBe(201);
      return r.json();
    };
    // One epoch of 100 one-second steps: preempted right after its first step, long before the epoch's
    // checkpoint, so the only checkpoint it can resume from is the one it writes on SIGTERM. Once resumed it
    // runs its remaining steps without pausing.
    const low = await create(
      'low',
      'low',
      2,
      { steps_per_epoch: 100, step_seconds: 1, resumed_step_seconds: 0 },
      1,
    );
    await waitFor(
      'low running with a report',
      async () => {
        const j = await get(low.id);
        return j.status === 'running' && j.progress.currentStep >= 1;
      },
      240_000,
    );
    const high = await create('high', 'high', 1, { steps_per_epoch: 2, step_seconds: 0.2 }, 1);
    expect(high.status).toBe('queued');
    const highDone = await waitFor(
      'high finished',
      async () => {
        const j = await get(high.id);
        return ['completed', 'failed'].includes(j.status) ? j : null;
      },
      240_000,
    );
    expect(highDone.status, highDone.statusReason).toBe('completed');
    const lowDone = await waitFor(
      'low finished after resuming',
      async () => {
        const j = await get(low.id);
        return ['completed', 'failed', 'stopped'].includes(j.status) ? j : null;
      },
      300_000,
    );
    expect(lowDone.status, lowDone.statusReason).toBe('completed');
    expect(lowDone.preemptions).toBe(1);
    expect(lowDone.attempt).toBe(2);
    expect(lowDone.resumedFrom).toMatch(/^ckpt_/);
    // The checkpoint it resumed from is the one written on SIGTERM (mid-epoch), and the trainer started there.
    const resumed = await t.context.db.prisma.trainingCheckpoint.findUniqueOrThrow({
      where: { id: lowDone.resumedFrom },
    });
    expect(resumed.step).toBeGreaterThan(0);
    expect(resumed.step).toBeLessThan(100);
    // The job's end and its last log lines travel separately (the log writer flushes in batches).
    const resumedLines = await waitFor(
      'the resumed trainer’s log line',
      async () => {
        const logs = await call(t, { url: `/v2/training/jobs/${low.id}/logs?search=resumed%20from` });
        const lines = logs.json().logs.map((l: { message: string }) => l.message);
        return lines.length > 0 ? lines : null;
      },
      30_000,
    );
    expect(resumedLines).toEqual([`resumed from step ${resumed.step}`]);
    // Requeued because the agent said rank 0's logs were all in, not after waiting that out.
    expect(warnings.filter((w) => w.includes('did not confirm its final log lines'))).toEqual([]);
    expect(highDone.preemptions).toBe(0);
    // Billing: the low job's session closed when it gave its GPUs and a new one opened when it resumed.
    const sessions = (id: string) =>
      t.context.db.prisma.usageRecord.findMany({ where: { resourceId: id, kind: 'gpu_compute' } });
    const lowSessions = await sessions(low.id);
    expect(lowSessions.map((s) => (s.metadata as { reason: string }).reason).sort()).toEqual([
      'completed',
      'preempted',
    ]);
    expect(await sessions(high.id)).toHaveLength(1);
    const audit = await t.context.db.prisma.auditEvent.findMany({
      where: { type: 'training_preemption', resourceId: low.id },
    });
    expect(audit.map((a) => (a.details as { preemptedBy: string }).preemptedBy)).toEqual([high.id]);
    const events = await t.context.db.prisma.webhookEvent.findMany({ where: { type: 'training.preempted' } });
    expect(events.map((e) => (e.data as { jobId: string }).jobId)).toEqual([low.id]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TrainingJob } from '../db/generated/client.ts';
import { silentLogger } from '../logger.ts';
import { addAccount, type TestMember } from '../testing/accounts.ts';
import type { TestApp } from '../testing/app.ts';
import { createTestApp, ManualClock } from '../testing/index.ts';
import type { PreemptionPolicy } from './contract.ts';
import { PREEMPTED_EVENT, Preemption } from './preemption.ts';

const NOW = new Date('2026-11-20T12:00:00.000Z');
const HOST = 'host_preemptpolicy';
const VICTIM = 'job_preemptpolicy_low';

/**
 * Whose training work a waiting high-priority job may take (issue 18 point 5): its own account's by
 * default, any account's only by the operator's policy any-account, nobody's with off. The victim is a
 * running low-priority job of another account holding both GPUs of the only host; the preemption's
 * signal is recorded instead of reaching an agent (the Docker e2e, test/training/managed.e2e.test.ts, runs
 * the whole cycle).
 */
describe('training preemption policy', () => {
  let t: TestApp;
  let bob: TestMember;
  const signals: string[] = [];

  beforeAll(async () => {
    t = await createTestApp({ clock: new ManualClock(NOW) });
    bob = await addAccount(t, 'Bob');
    const prisma = t.context.db.prisma;
    const gpus = [0, 1].map((index) => ({ index, uuid: `GPU-pp-${index}` }));
    await prisma.host.create({
      data: {
        id: HOST,
        name: 'gpu-pp',
        hostname: 'gpu-pp.internal',
        credentialHash: 'p'.repeat(64),
        state: 'ready',
        lastHeartbeatAt: NOW,
        inventory: {
          gpus: { simulated: true, devices: gpus.map((g) => ({ ...g, name: 'NVIDIA H100 80GB HBM3' })) },
        },
        simulated: true,
        gpuCount: 2,
      },
    });
    const workloadId = `${VICTIM}-r0`;
    await prisma.trainingJob.create({
      data: {
        id: VICTIM,
        accountId: bob.accountId,
        createdById: bob.userId,
        name: 'bobs-low',
        modelType: 'custom',
        config: {},
        gpuType: 'H100',
        gpusPerWorker: 2,
        image: 'anvil-test/busybox:latest',
        priority: 'low',
        status: 'running',
        attempt: 1,
        placement: [{ rank: 0, workloadId, hostId: HOST, gpus, staleContainerId: null }],
        startedAt: NOW,
        sessionStartedAt: NOW,
      },
    });
    await prisma.workload.create({
      data: {
        id: workloadId,
        hostId: HOST,
        kind: 'training',
        ownerAccountId: bob.accountId,
        spec: { workloadId, gpus, labels: { 'anvil.training-job': VICTIM } },
        phase: 'running',
        actualStatus: { workloadId, containerId: 'c-pp', phase: 'running' },
      },
    });
    await t.context.clusters.allocator.sync();
    const capacity = await prisma.$queryRawUnsafe<{ free_indices: number[] }[]>(
      'SELECT free_indices FROM host_capacity WHERE host_id = $1',
      HOST,
    );
    expect(capacity.map((c) => c.free_indices)).toEqual([[]]);
  }, 300_000);

  afterAll(async () => {
    await t?.close();
  });

  /** A high-priority job of the default account that needs both GPUs (not stored: only its fields matter). */
  const waiting = {
    id: 'job_preemptpolicy_high',
    name: 'high',
    priority: 'high',
    gpuType: 'H100',
    workers: 1,
    gpusPerWorker: 2,
    attempt: 0,
    preemptions: 0,
    stopRequest: null,
  } as unknown as TrainingJob;

  const preemption = (policy: PreemptionPolicy) =>
    new Preemption({
      db: t.context.db,
      clock: new ManualClock(NOW),
      audit: t.context.accounts.audit,
      policy,
      signal: async (job, signal) => {
        signals.push(`${job.id} ${signal}`);
      },
      logger: silentLogger,
    });

  const victim = () => t.context.db.prisma.trainingJob.findUniqueOrThrow({ where: { id: VICTIM } });

  it("takes no other account's work by default, nor anyone's with off", async () => {
    const job = { ...waiting, accountId: t.accountId };
    expect(await preemption('same-account').consider(job)).toEqual([]);
    expect(await preemption('off').consider(job)).toEqual([]);
    // Bob's own high-priority job would take it under the default policy, but not with off.
    expect(await preemption('off').consider({ ...job, accountId: bob.accountId })).toEqual([]);
    expect(signals).toEqual([]);
    expect((await victim()).status).toBe('running');
  });

  it("takes another account's work under any-account, without naming the taker to the victim's account", async () => {
    expect(await preemption('any-account').consider({ ...waiting, accountId: t.accountId })).toEqual([
      VICTIM,
    ]);
    expect(signals).toEqual([`${VICTIM} SIGTERM`]);
    const row = await victim();
    expect([row.status, row.preemptions]).toEqual(['stopping', 1]);
    expect((row.stopRequest as { preemptedBy: string }).preemptedBy).toBe(waiting.id);
    const events = await t.context.db.prisma.webhookEvent.findMany({ where: { type: PREEMPTED_EVENT } });
    expect(events.map((e) => [e.accountId, (e.data as { preemptedBy: string | null }).preemptedBy])).toEqual([
      [bob.accountId, null],
    ]);
    const audit = await t.context.db.prisma.auditEvent.findMany({ where: { type: 'training_preemption' } });
    expect(audit.map((a) => [a.accountId, a.resourceId])).toEqual([[bob.accountId, VICTIM]]);
  });
});

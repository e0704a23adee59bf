import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../testing/app.ts';
import { createTestApp, ManualClock } from '../testing/index.ts';
import { waitFor } from '../testing/wait.ts';
import { FINAL_REPORTS_WAIT_MS } from './supervisor.ts';

const NOW = new Date('2026-11-20T12:00:00.000Z');
const HOST = 'host_finalreports';
const ago = (ms: number) => new Date(NOW.getTime() - ms);

/**
 * A preempted job is queued again only once its rank 0's agent says that container's logs are all in,
 * so it resumes from the checkpoint written on SIGTERM however late that line arrives; an agent that
 * never says so is waited for FINAL_REPORTS_WAIT_MS after the exit, and that is logged. The rows are
 * what the preemption and the agent's reports leave (the e2e in test/training/managed.e2e.test.ts runs
 * the whole cycle on Docker); the clock is moved by hand.
 */
describe('a preempted training job waits for its final reports before it is queued again', () => {
  let t: TestApp;
  let clock: ManualClock;
  const logged: string[] = [];

  beforeAll(async () => {
    clock = new ManualClock(NOW);
    const sink = new Writable({
      write(chunk, _encoding, done) {
        logged.push(String(chunk));
        done();
      },
    });
    t = await createTestApp({ clock, logger: pino({ level: 'warn' }, sink) });
    // Registered, never ready: nothing is placed on it, so a requeued job stays queued.
    await t.context.db.prisma.host.create({
      data: {
        id: HOST,
        name: 'gpu-f',
        hostname: 'gpu-f.internal',
        credentialHash: 'f'.repeat(64),
        inventory: {},
        simulated: true,
        gpuCount: 2,
      },
    });
  }, 300_000);

  afterAll(async () => {
    await t?.close();
  });

  /** A job preempted 20 s ago whose rank 0 (container `containerId`) exited 10 s ago, with exit code 0. */
  async function preemptedJob(id: string, containerId: string): Promise<void> {
    const prisma = t.context.db.prisma;
    const workloadId = `${id}-r0`;
    await prisma.trainingJob.create({
      data: {
        id,
        accountId: t.accountId,
        createdById: t.userId,
        name: id,
        modelType: 'custom',
        config: {},
        gpuType: 'h100',
        image: 'anvil-test/busybox:latest',
        priority: 'low',
        status: 'stopping',
        attempt: 1,
        placement: [{ rank: 0, workloadId, hostId: HOST, gpus: [], staleContainerId: null }],
        stopRequest: { saveCheckpoint: true, reason: 'preempted', at: ago(20_000), preemptedBy: 'job_high' },
        preemptions: 1,
        sessionStartedAt: ago(60_000),
        startedAt: ago(60_000),
      },
    });
    await prisma.workload.create({
      data: {
        id: workloadId,
        hostId: HOST,
        kind: 'training',
        ownerAccountId: t.accountId,
        spec: { workloadId, labels: { 'anvil.training-job': id } },
        phase: 'exited',
        actualStatus: {
          workloadId,
          containerId,
          phase: 'exited',
          exitCode: 0,
          finishedAt: ago(10_000).toISOString(),
        },
      },
    });
  }

  const job = (id: string) => t.context.db.prisma.trainingJob.findUniqueOrThrow({ where: { id } });
  const checkpointLine = (id: string, containerId: string, step: number) => ({
    workloadId: `${id}-r0`,
    containerId,
    stream: 'stdout' as const,
    ts: ago(10_500).toISOString().replace('Z', '000000Z'),
    line: `ANVIL_REPORT {"type":"checkpoint","path":"step-${step}","step":${step},"epoch":1,"loss":0.5}`,
  });

  it('is queued once the agent says its logs are in, to resume from the checkpoint written on SIGTERM', async () => {
    const id = 'job_finalreports_a';
    await preemptedJob(id, 'c-a1');
    // 10 s after the exit, the checkpoint line is not stored yet and the agent has not said it is done.
    await t.context.training.supervisor.pass();
    expect((await job(id)).status).toBe('stopping');

    // A mark for an earlier container of the workload says nothing about this one.
    t.context.fleet.telemetry.ingestLogs(HOST, [], [{ workloadId: `${id}-r0`, containerId: 'c-a0' }]);
    await t.context.fleet.telemetry.flush();
    await t.context.training.supervisor.pass();
    expect((await job(id)).status).toBe('stopping');

    t.context.fleet.telemetry.ingestLogs(
      HOST,
      [checkpointLine(id, 'c-a1', 7)],
      [{ workloadId: `${id}-r0`, containerId: 'c-a1' }],
    );
    await t.context.fleet.telemetry.flush();
    await t.context.training.supervisor.pass();
    const queued = await waitFor('requeued', async () => {
      const j = await job(id);
      return j.status === 'queued' ? j : null;
    });
    expect(queued.attempt).toBe(2);
    const checkpoint = await t.context.db.prisma.trainingCheckpoint.findUniqueOrThrow({
      where: { id: queued.resumeFrom ?? '' },
    });
    expect(checkpoint.step).toBe(7);
    expect(logged.join('')).not.toContain(id);
  });

  it('without the agent saying so, waits FINAL_REPORTS_WAIT_MS after the exit, then goes on and logs it', async () => {
    const id = 'job_finalreports_b';
    await preemptedJob(id, 'c-b1');
    clock.set(new Date(NOW.getTime() - 10_000 + FINAL_REPORTS_WAIT_MS - 1_000));
    await t.context.training.supervisor.pass();
    expect((await job(id)).status).toBe('stopping');

    // The line arrived, the mark never does (an agent that restarted in between).
    t.context.fleet.telemetry.ingestLogs(HOST, [checkpointLine(id, 'c-b1', 3)]);
    await t.context.fleet.telemetry.flush();
    clock.advance(1_000);
    await t.context.training.supervisor.pass();
    const queued = await waitFor('requeued', async () => {
      const j = await job(id);
      return j.status === 'queued' ? j : null;
    });
    expect(queued.resumeFrom).toMatch(/^ckpt_/);
    const warning = logged.map((l) => JSON.parse(l)).find((l) => l.jobId === id);
    expect(warning?.msg).toBe(
      "rank 0's agent did not confirm its final log lines: requeued with the reports read so far",
    );
  });
});

import { newId } from '@anvil/shared';
import type { Prisma } from '../db/generated/client.ts';
import { closeJobSession } from '../training/billing.ts';
import { REPORT_MARKER } from '../training/contract.ts';
import { workloadIdOf } from '../training/launcher.ts';
import { ReportReader } from '../training/reports.ts';
import type { TestApp } from './index.ts';

/**
 * Training jobs in the state an experiments test needs, made through the training side's own code where
 * it has one: the trainer's reports go in as rank 0's stdout lines and are read by its ReportReader (the
 * metric history and latest metrics), billing goes through its closeJobSession (usage_records). Only the
 * job row itself and its status are written directly, as its supervisor would leave them.
 */
export interface SeedJob {
  accountId?: string;
  userId?: string;
  name?: string;
  status: 'pending' | 'running' | 'completed' | 'failed' | 'cancelled' | 'stopped';
  parameters?: Record<string, string | number | boolean | null>;
  /** Metrics reports, oldest first: {loss: 0.5, accuracy: 0.8, ...}. */
  reports?: Record<string, number>[];
  startedAt?: Date;
  /** Hours the job ran (from startedAt), billed at hourlyRate. */
  hours?: number;
  hourlyRate?: number;
}

const HOUR_MS = 3_600_000;

export async function seedJob(t: TestApp, seed: SeedJob): Promise<string> {
  const prisma = t.context.db.prisma;
  const id = newId('job');
  const startedAt = seed.startedAt ?? new Date('2026-11-27T08:00:00Z');
  const started = seed.status !== 'pending';
  const job = await prisma.trainingJob.create({
    data: {
      id,
      accountId: seed.accountId ?? t.accountId,
      createdById: seed.userId ?? t.userId,
      name: seed.name ?? `job ${id.slice(4, 10)}`,
      modelType: 'custom',
      config: { parameters: seed.parameters ?? {} } as Prisma.InputJsonValue,
      parameters: (seed.parameters ?? {}) as Prisma.InputJsonValue,
      gpuType: 'h100',
      image: 'anvil-test/busybox',
      status: started ? 'running' : 'pending',
      hourlyRate: seed.hourlyRate ?? 0,
      startedAt: started ? startedAt : null,
      sessionStartedAt: started ? startedAt : null,
      createdAt: startedAt,
      updatedAt: startedAt,
    },
  });
  if (seed.reports?.length) {
    const workloadId = workloadIdOf(id, job.attempt, 0);
    await prisma.logEntry.createMany({
      data: seed.reports.map((values, step) => {
        const at = new Date(startedAt.getTime() + (step + 1) * 1000);
        return {
          hostId: 'host_fixture',
          workloadId,
          containerId: 'fixture',
          stream: 'stdout',
          ts: at.toISOString(),
          at,
          line: `${REPORT_MARKER} ${JSON.stringify({ type: 'metrics', step: step + 1, ...values })}`,
          receivedAt: at,
        };
      }),
    });
    await new ReportReader(t.context.db, t.context.clock).drain(id);
  }
  if (seed.status !== 'running' && started) {
    const endedAt = new Date(startedAt.getTime() + (seed.hours ?? 1) * HOUR_MS);
    await prisma.$transaction(async (tx) => {
      await closeJobSession(tx, job, endedAt, seed.status);
      await tx.trainingJob.update({
        where: { id },
        data: {
          status: seed.status,
          completedAt: seed.status === 'stopped' ? null : endedAt,
          updatedAt: endedAt,
        },
      });
    });
  }
  return id;
}

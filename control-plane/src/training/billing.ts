import { newId } from '@anvil/shared';
import { sessionCost } from '../billing/sessions.ts';
import type { Prisma, TrainingJob } from '../db/generated/client.ts';

type Tx = Prisma.TransactionClient;

const HOUR_MS = 3_600_000;

/**
 * Closes the job's open billing session at `endedAt`: one usage_records row (resource type training_job,
 * kind gpu_compute, quantity in hours, GPU-hours = hours x GPUs of every worker, cost at the rate fixed at
 * placement) and session_started_at cleared, in the caller's transaction. A second close is a no-op.
 */
export async function closeJobSession(
  tx: Tx,
  job: Pick<
    TrainingJob,
    'id' | 'accountId' | 'createdById' | 'gpuType' | 'gpusPerWorker' | 'workers' | 'hourlyRate'
  >,
  endedAt: Date,
  reason: string,
): Promise<void> {
  const rows = await tx.$queryRawUnsafe<{ started: Date | null }[]>(
    'SELECT session_started_at AS started FROM training_jobs WHERE id = $1 FOR UPDATE',
    job.id,
  );
  const started = rows[0]?.started;
  if (!started) return;
  await tx.$executeRawUnsafe('UPDATE training_jobs SET session_started_at = NULL WHERE id = $1', job.id);
  const startedAt = new Date(started);
  const end = endedAt.getTime() < startedAt.getTime() ? startedAt : endedAt;
  const ms = end.getTime() - startedAt.getTime();
  const hours = ms / HOUR_MS;
  const gpus = job.gpusPerWorker * job.workers;
  await tx.usageRecord.create({
    data: {
      id: newId('use'),
      accountId: job.accountId,
      userId: job.createdById,
      resourceType: 'training_job',
      resourceId: job.id,
      kind: 'gpu_compute',
      gpuType: job.gpuType,
      gpuCount: gpus,
      quantity: hours,
      unit: 'hours',
      gpuHours: hours * gpus,
      cost: sessionCost(job.hourlyRate, ms),
      currency: 'USD',
      startedAt,
      endedAt: end,
      metadata: { reason, hourly_rate: job.hourlyRate },
    },
  });
}

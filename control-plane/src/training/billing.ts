import { recordGpuSession } from '../billing/ledger.ts';
import type { Prisma, TrainingJob } from '../db/generated/client.ts';

type Tx = Prisma.TransactionClient;

/**
 * Closes the job's open billing session at `endedAt`: its usage record (the ledger's recordGpuSession,
 * resource type training_job, GPU-hours = hours x GPUs of every worker, cost at the rate fixed at
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
  const gpus = job.gpusPerWorker * job.workers;
  await recordGpuSession(tx, {
    accountId: job.accountId,
    userId: job.createdById,
    resourceType: 'training_job',
    resourceId: job.id,
    gpuType: job.gpuType,
    gpuCount: gpus,
    hourlyRate: job.hourlyRate,
    startedAt: new Date(started),
    endedAt,
    reason,
  });
}

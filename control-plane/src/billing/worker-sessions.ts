import type { EndpointWorker, Prisma } from '../db/generated/client.ts';
import { recordGpuSession } from './ledger.ts';

type Tx = Prisma.TransactionClient;

/**
 * Endpoint workers bill their uptime, as RunPod bills active workers: from the moment the worker's
 * container runs (model loading and idle time included) until the worker is removed (scaled down,
 * drained, replaced, failed, lost or its endpoint deleted), per GPU at the GPU type's price fixed when
 * the worker was placed. The open session lives in the worker row (billing_started_at), so a restarted
 * control plane or another replica closes what this one opened; executions are recorded with cost 0
 * (jobs.ts), their GPU time being part of this uptime.
 */

/**
 * The start of a worker's session: when its container started as the agent reports it, kept within
 * [placed, now] so an agent's wrong clock can neither bill before the placement nor in the future.
 * Null while the container has not started.
 */
export function billingStartOf(containerStartedAt: unknown, placedAt: Date, now: Date): Date | null {
  if (typeof containerStartedAt !== 'string') return null;
  const ms = Date.parse(containerStartedAt);
  if (Number.isNaN(ms)) return null;
  return new Date(Math.min(now.getTime(), Math.max(placedAt.getTime(), ms)));
}

/** Opens the worker's session at `startedAt` unless one is open or the worker is gone (then a no-op). */
export async function openWorkerSession(tx: Tx, workerId: string, startedAt: Date): Promise<boolean> {
  const opened = await tx.endpointWorker.updateMany({
    where: { id: workerId, billingStartedAt: null, status: { in: ['starting', 'ready', 'draining'] } },
    data: { billingStartedAt: startedAt },
  });
  return opened.count > 0;
}

/**
 * Closes the worker's open session at `endedAt` into its usage record (the ledger's recordGpuSession,
 * resource type endpoint, cost at the worker's rate) and clears billing_started_at, in the caller's
 * transaction. The row lock makes a second close (another replica, a retry) a no-op. The
 * record names the host and GPU UUIDs, so reports find the GPU samples of the session later.
 */
export async function closeWorkerSession(
  tx: Tx,
  worker: Pick<EndpointWorker, 'id' | 'endpointId' | 'accountId' | 'hostId'>,
  endedAt: Date,
  reason: string,
): Promise<boolean> {
  const rows = await tx.$queryRawUnsafe<{ started: Date | null; rate: number }[]>(
    'SELECT billing_started_at AS started, hourly_rate AS rate FROM endpoint_workers WHERE id = $1 FOR UPDATE',
    worker.id,
  );
  const started = rows[0]?.started;
  if (!started) return false;
  await tx.$executeRawUnsafe(
    'UPDATE endpoint_workers SET billing_started_at = NULL WHERE id = $1',
    worker.id,
  );
  const [endpoint, workload] = await Promise.all([
    tx.endpoint.findUnique({
      where: { id: worker.endpointId },
      select: { ownerId: true, name: true, gpuType: true, gpuCount: true },
    }),
    tx.workload.findUnique({ where: { id: worker.id }, select: { spec: true } }),
  ]);
  const gpus = (workload?.spec as { gpus?: { uuid?: unknown }[] } | null)?.gpus ?? [];
  await recordGpuSession(tx, {
    accountId: worker.accountId,
    userId: endpoint?.ownerId ?? null,
    resourceType: 'endpoint',
    resourceId: worker.endpointId,
    gpuType: endpoint?.gpuType ?? null,
    gpuCount: endpoint?.gpuCount ?? gpus.length,
    hourlyRate: Number(rows[0]?.rate ?? 0),
    startedAt: new Date(started),
    endedAt,
    reason,
    details: {
      worker_id: worker.id,
      ...(endpoint ? { name: endpoint.name } : {}),
      host_id: worker.hostId,
      gpu_uuids: gpus.map((g) => g.uuid).filter((u): u is string => typeof u === 'string'),
    },
  });
  return true;
}

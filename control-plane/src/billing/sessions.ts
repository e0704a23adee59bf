import type { Cluster, Prisma } from '../db/generated/client.ts';
import { gpuUuidsAt } from './gpu-devices.ts';
import { type ClosedSession, recordGpuSession } from './ledger.ts';

type Tx = Prisma.TransactionClient;

/**
 * Closes the cluster's open billing session at `endedAt` (contract 6): its usage record (the ledger's
 * recordGpuSession, resource type cluster, cost at the rate fixed at placement) and session_started_at
 * cleared, in the caller's transaction. The record names the host and GPU UUIDs
 * the session held (usage/gpu-history.ts reads their samples). The UPDATE's condition makes a second
 * close of the same session (another replica, a retried step) a no-op. Null when no session was open.
 */
export async function closeSession(
  tx: Tx,
  cluster: Pick<Cluster, 'id' | 'accountId' | 'ownerId' | 'gpuType' | 'gpuCount' | 'hourlyRate'>,
  endedAt: Date,
  reason: string,
): Promise<ClosedSession | null> {
  const rows = await tx.$queryRawUnsafe<
    { started: Date | null; host_id: string | null; gpu_indices: number[] | null }[]
  >(
    'SELECT session_started_at AS started, host_id, gpu_indices FROM clusters WHERE id = $1 FOR UPDATE',
    cluster.id,
  );
  const started = rows[0]?.started;
  const hostId = rows[0]?.host_id ?? null;
  if (!started) return null;
  await tx.$executeRawUnsafe(
    'UPDATE clusters SET session_started_at = NULL, updated_at = $2 WHERE id = $1',
    cluster.id,
    endedAt,
  );
  // The GPUs the session held, so reports find their samples once the cluster has released them.
  const host = hostId
    ? await tx.host.findUnique({ where: { id: hostId }, select: { inventory: true } })
    : null;
  const gpus = hostId
    ? { host_id: hostId, gpu_uuids: gpuUuidsAt(host?.inventory, rows[0]?.gpu_indices ?? []) }
    : {};
  return recordGpuSession(tx, {
    accountId: cluster.accountId,
    userId: cluster.ownerId,
    resourceType: 'cluster',
    resourceId: cluster.id,
    gpuType: cluster.gpuType,
    gpuCount: cluster.gpuCount,
    hourlyRate: cluster.hourlyRate,
    startedAt: new Date(started),
    endedAt,
    reason,
    details: gpus,
  });
}

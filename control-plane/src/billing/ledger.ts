import { newId } from '@anvil/shared';
import type { Prisma } from '../db/generated/client.ts';

type Tx = Prisma.TransactionClient;

const HOUR_MS = 3_600_000;

/** Cost of a session of `ms` milliseconds at `hourlyRate` USD per hour, rounded to 1/10000 USD. */
export function sessionCost(hourlyRate: number, ms: number): number {
  return Math.round(((hourlyRate * Math.max(0, ms)) / HOUR_MS) * 10_000) / 10_000;
}

/** A GPU session that just closed: a cluster's, an endpoint worker's or a training job's. */
export interface GpuSession {
  accountId: string;
  /** Whose resource it was (the owner, the job's creator); null when that is gone. */
  userId: string | null;
  resourceType: 'cluster' | 'endpoint' | 'training_job';
  resourceId: string;
  gpuType: string | null;
  gpuCount: number;
  /** USD per hour for the whole session (all its GPUs), fixed when it was placed. */
  hourlyRate: number;
  startedAt: Date;
  /** Before startedAt (an agent's clock, a retried step) it is taken as startedAt: nothing is billed. */
  endedAt: Date;
  /** Why it closed (stopped, deleted, failed, …): metadata.reason. */
  reason: string;
  /** Further metadata of the resource type (host and GPU UUIDs, worker id), after reason and hourly_rate. */
  details?: Record<string, unknown>;
}

export interface ClosedSession {
  startedAt: Date;
  endedAt: Date;
  hours: number;
  cost: number;
}

/**
 * The usage ledger of GPU time (contract 6): one usage_records row of kind gpu_compute per closed
 * session, in the caller's transaction (the one that cleared the session's start, so a session is
 * recorded once): quantity in hours, GPU-hours, and its cost at the session's rate. Clusters, endpoint
 * workers and training jobs all bill through here, so their records read alike in usage reports.
 */
export async function recordGpuSession(tx: Tx, session: GpuSession): Promise<ClosedSession> {
  const { startedAt } = session;
  const end = session.endedAt.getTime() < startedAt.getTime() ? startedAt : session.endedAt;
  const ms = end.getTime() - startedAt.getTime();
  const hours = ms / HOUR_MS;
  const cost = sessionCost(session.hourlyRate, ms);
  await tx.usageRecord.create({
    data: {
      id: newId('use'),
      accountId: session.accountId,
      userId: session.userId,
      resourceType: session.resourceType,
      resourceId: session.resourceId,
      kind: 'gpu_compute',
      gpuType: session.gpuType,
      gpuCount: session.gpuCount,
      quantity: hours,
      unit: 'hours',
      gpuHours: hours * session.gpuCount,
      cost,
      currency: 'USD',
      startedAt,
      endedAt: end,
      metadata: {
        reason: session.reason,
        hourly_rate: session.hourlyRate,
        ...session.details,
      } as Prisma.InputJsonValue,
    },
  });
  return { startedAt, endedAt: end, hours, cost };
}

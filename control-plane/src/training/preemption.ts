import type { AuditLog } from '../accounts/audit.ts';
import { enqueueWebhookEvent } from '../accounts/webhook-outbox.ts';
import type { Clock } from '../auth/clock.ts';
import type { TrainingJob } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import type { PreemptionPolicy } from './contract.ts';
import { type PlacedWorker, workloadIdOf } from './launcher.ts';
import { type HostFree, planGang } from './placement.ts';

export const PREEMPTED_EVENT = 'training.preempted';

const RANK: Record<string, number> = { high: 0, normal: 1, low: 2 };
const rankOf = (priority: string) => RANK[priority] ?? 1;

/** What a preempted job's stopRequest holds besides the ordinary stop's fields. */
export interface PreemptionStop {
  saveCheckpoint: true;
  reason: string;
  at: string;
  preemptedBy: string;
}

export function preemptedBy(job: Pick<TrainingJob, 'stopRequest'>): string | null {
  const stop = job.stopRequest as Partial<PreemptionStop> | null;
  return typeof stop?.preemptedBy === 'string' ? stop.preemptedBy : null;
}

/**
 * The victims that free enough GPUs for `waiting`, lowest priority first and, within one, the latest
 * started first (the least work to redo); null when even all of them would not make it fit. Pure.
 */
export function chooseVictims(
  waiting: { workers: number; gpusPerWorker: number; rank0Host: string | null },
  free: readonly HostFree[],
  candidates: readonly { id: string; placement: PlacedWorker[] }[],
): string[] | null {
  const hosts = new Map(free.map((h) => [h.hostId, [...h.free]]));
  const fits = () =>
    planGang(
      [...hosts].map(([hostId, indices]) => ({ hostId, free: indices })),
      waiting,
    ) !== null;
  const chosen: string[] = [];
  if (fits()) return chosen;
  for (const candidate of candidates) {
    chosen.push(candidate.id);
    for (const worker of candidate.placement) {
      const list = hosts.get(worker.hostId);
      if (!list) continue;
      list.push(...worker.gpus.map((g) => g.index));
      list.sort((a, b) => a - b);
    }
    if (fits()) return chosen;
  }
  return null;
}

/**
 * Preemption of training work (README: Preemption): a queued job that does not fit may take the GPUs of
 * running training jobs of lower priority, of its own account or, when the operator's policy says
 * any-account, of any. Only training jobs are ever candidates: clusters and endpoint workers are never
 * preempted. The victim is stopped as a stop with a checkpoint is (SIGTERM, the grace period), then the
 * supervisor queues it again to resume from its latest checkpoint (requeue) instead of ending it.
 */
export class Preemption {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      audit: AuditLog;
      policy: PreemptionPolicy;
      signal: (job: TrainingJob, signal: 'SIGTERM') => Promise<void>;
      logger: Logger;
    },
  ) {}

  /** For a queued job that found no room: preempts what frees enough, if anything does. */
  async consider(job: TrainingJob): Promise<string[]> {
    if (this.d.policy === 'off' || rankOf(job.priority) === RANK['low']) return [];
    const db = this.d.db.prisma;
    // One preemption at a time per waiting job: its victims are still stopping.
    const inFlight = await db.trainingJob.count({
      where: { status: 'stopping', stopRequest: { path: ['preemptedBy'], equals: job.id } },
    });
    if (inFlight > 0) return [];
    const lower = Object.keys(RANK).filter((p) => rankOf(p) > rankOf(job.priority));
    const candidates = await db.trainingJob.findMany({
      where: {
        status: 'running',
        gpuType: job.gpuType,
        priority: { in: lower },
        id: { not: job.id },
        ...(this.d.policy === 'same-account' ? { accountId: job.accountId } : {}),
      },
    });
    if (candidates.length === 0) return [];
    candidates.sort(
      (a, b) =>
        rankOf(b.priority) - rankOf(a.priority) ||
        (b.startedAt?.getTime() ?? 0) - (a.startedAt?.getTime() ?? 0) ||
        (a.id < b.id ? -1 : 1),
    );
    const capacity = await this.d.db.prisma.$queryRawUnsafe<{ host_id: string; free_indices: number[] }[]>(
      `SELECT c.host_id, c.free_indices FROM host_capacity c JOIN hosts h ON h.id = c.host_id
        WHERE c.gpu_type = $1 AND h.deleted_at IS NULL AND h.state = 'ready' AND NOT h.cordoned`,
      job.gpuType,
    );
    const rank0 = await db.workload.findUnique({ where: { id: workloadIdOf(job.id, job.attempt, 0) } });
    const victims = chooseVictims(
      { workers: job.workers, gpusPerWorker: job.gpusPerWorker, rank0Host: rank0?.hostId ?? null },
      capacity.map((c) => ({ hostId: c.host_id, free: c.free_indices })),
      candidates.map((c) => ({ id: c.id, placement: c.placement as unknown as PlacedWorker[] })),
    );
    if (!victims) return [];
    const preempted: string[] = [];
    for (const victim of candidates.filter((c) => victims.includes(c.id))) {
      if (await this.#preempt(victim, job)) preempted.push(victim.id);
    }
    return preempted;
  }

  async #preempt(victim: TrainingJob, by: TrainingJob): Promise<boolean> {
    const now = this.d.clock.now();
    const sameAccount = victim.accountId === by.accountId;
    const reason = sameAccount
      ? `preempted by job ${by.id} (priority ${by.priority})`
      : `preempted by a ${by.priority}-priority job of another account (operator policy any-account)`;
    const stop: PreemptionStop = { saveCheckpoint: true, reason, at: now.toISOString(), preemptedBy: by.id };
    const done = await this.d.db.prisma.$transaction(async (tx) => {
      const changed = await tx.trainingJob.updateMany({
        where: { id: victim.id, status: 'running', attempt: victim.attempt },
        data: {
          status: 'stopping',
          statusReason: `${reason}: signalled SIGTERM to checkpoint and exit; it resumes from its checkpoint when GPUs free`,
          stopRequest: stop as unknown as object,
          preemptions: { increment: 1 },
          preemptedAt: now,
          updatedAt: now,
        },
      });
      if (changed.count === 0) return false;
      const data = {
        jobId: victim.id,
        name: victim.name,
        priority: victim.priority,
        attempt: victim.attempt,
        preemptions: victim.preemptions + 1,
        // Another account's job is not named to the victim's account.
        preemptedBy: sameAccount ? by.id : null,
        preemptedByPriority: by.priority,
        reason,
      };
      await enqueueWebhookEvent(tx, { accountId: victim.accountId, type: PREEMPTED_EVENT, data });
      await this.d.audit.record(
        {
          accountId: victim.accountId,
          type: 'training_preemption',
          // The control plane's scheduler did it, no member.
          actor: null,
          action: 'training_job_preempted',
          resource: { type: 'training_job', id: victim.id, name: victim.name },
          details: { ...data, policy: this.d.policy },
        },
        tx,
      );
      return true;
    });
    if (!done) return false;
    this.d.logger.info({ jobId: victim.id, preemptedBy: by.id }, 'training job preempted');
    await this.d.signal(victim, 'SIGTERM');
    return true;
  }
}

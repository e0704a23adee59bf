import { ApiError } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { LogSubject } from '../cluster-telemetry/logs.ts';
import type { Database } from '../db/index.ts';
import type { EndpointService } from '../serverless/service.ts';
import { workloadIdOf } from '../training/launcher.ts';
import type { TrainingService } from '../training/service.ts';

export interface TrainingWorkerLogs {
  subject: LogSubject;
  accountId: string;
  jobId: string;
  rank: number;
  attempt: number;
}

export interface EndpointWorkerLogs {
  subject: LogSubject;
  accountId: string;
  endpointId: string;
  workerId: string;
}

/**
 * Whose container logs a customer may read, with the same authorisation as reading the resource itself:
 * a training job's worker (key scope training, role clusters:read, the job's grants and shares) or an
 * endpoint's worker (endpoints:read). Another account's job or endpoint answers its 404, so nothing tells
 * it exists. The lines themselves are the fleet's log store, read by workload id (cluster-telemetry/logs.ts).
 */
export class LogSubjects {
  constructor(
    private readonly d: {
      db: Database;
      training: Pick<TrainingService, 'requireAccess' | 'requireJob'>;
      endpoints: Pick<EndpointService, 'require'>;
    },
  ) {}

  /**
   * A worker of a training job: rank (default 0) below the job's workers, attempt (default the current one)
   * from 1 to the current. Rank 0 keeps one container name across attempts (its volume holds the
   * checkpoints), so its lines span every attempt; other ranks have one workload per attempt.
   */
  async trainingWorker(
    actor: Actor,
    jobId: string,
    query: { rank?: number | undefined; attempt?: number | undefined },
  ): Promise<TrainingWorkerLogs> {
    await this.d.training.requireAccess(actor, 'read');
    const job = await this.d.training.requireJob(actor, jobId, 'read');
    const rank = query.rank ?? 0;
    const current = Math.max(job.attempt, 1);
    const attempt = query.attempt ?? current;
    const details: Record<string, string> = {};
    if (!Number.isInteger(rank) || rank < 0 || rank >= job.workers) {
      details['rank'] = `must be from 0 to ${job.workers - 1} (the job has ${job.workers} workers)`;
    }
    if (!Number.isInteger(attempt) || attempt < 1 || attempt > current) {
      details['attempt'] = `must be from 1 to ${current} (the job's runs so far)`;
    }
    if (Object.keys(details).length > 0) {
      throw new ApiError(
        'INVALID_PARAMETERS',
        `invalid parameters: ${Object.keys(details).join(', ')}`,
        details,
      );
    }
    return {
      subject: { id: workloadIdOf(job.id, attempt, rank) },
      accountId: job.accountId,
      jobId: job.id,
      rank,
      attempt,
    };
  }

  /** A worker of an endpoint (any it ever had, running or gone while its lines are kept). */
  async endpointWorker(actor: Actor, endpointId: string, workerId: string): Promise<EndpointWorkerLogs> {
    const endpoint = await this.d.endpoints.require(actor, endpointId, 'read');
    const worker = await this.d.db.prisma.endpointWorker.findFirst({
      where: { id: workerId, endpointId: endpoint.id, accountId: endpoint.accountId },
      select: { id: true },
    });
    if (!worker) {
      throw new ApiError('ENDPOINT_WORKER_NOT_FOUND', `endpoint ${endpoint.id} has no worker ${workerId}`, {
        endpointId: endpoint.id,
        workerId,
      });
    }
    return {
      subject: { id: worker.id },
      accountId: endpoint.accountId,
      endpointId: endpoint.id,
      workerId: worker.id,
    };
  }

  /** The endpoint's workers, newest first (ids for their logs), with their state as the control plane has it. */
  async endpointWorkers(actor: Actor, endpointId: string, limit = 100) {
    const endpoint = await this.d.endpoints.require(actor, endpointId, 'read');
    const rows = await this.d.db.prisma.endpointWorker.findMany({
      where: { endpointId: endpoint.id, accountId: endpoint.accountId },
      orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
      take: limit,
    });
    return {
      endpointId: endpoint.id,
      workers: rows.map((w) => ({
        id: w.id,
        status: w.status,
        statusReason: w.statusReason,
        createdAt: w.createdAt.toISOString(),
        readyAt: w.readyAt?.toISOString() ?? null,
        stoppedAt: w.stoppedAt?.toISOString() ?? null,
        logsUrl: `/v2/endpoints/${endpoint.id}/workers/${w.id}/logs`,
      })),
    };
  }
}

import { ApiError, newId } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import { Prisma, type TrainingJob } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import type { Logger } from '../logger.ts';
import { syncCapacity } from '../scheduler/capacity.ts';
import { listOrderBy } from '../util/list-order.ts';
import type { Signal } from '../util/signal.ts';
import {
  type CreateJobRequest,
  type FullJobRequest,
  isShortForm,
  type JobInput,
  jobInputOf,
} from './config.ts';
import { CHECKPOINT_DIR } from './contract.ts';
import {
  type Launcher,
  type LaunchOutcome,
  type PlacedWorker,
  type WorkerSpecOf,
  workerSpec,
} from './launcher.ts';
import type { TrainingRecipes } from './recipes.ts';
import type { ReportReader } from './reports.ts';
import { loadJobUsage } from './summary.ts';
import { viewJob, viewJobListItem, viewShortCreated } from './view.ts';

export const JOB_STATUSES = [
  'queued',
  'pending',
  'running',
  'stopping',
  'stopped',
  'completed',
  'failed',
  'cancelled',
] as const;
export const ACTIVE_STATUSES = ['queued', 'pending', 'running', 'stopping'] as const;
export const RESUMABLE_STATUSES = ['stopped', 'failed', 'cancelled'] as const;

export interface ListJobsQuery {
  status?: string;
  modelType?: string;
  tuneId?: string;
  limit?: number;
  offset?: number;
  sort?: 'created_at' | 'updated_at' | 'name';
  order?: 'asc' | 'desc';
}

export interface JobOwner {
  accountId: string;
  userId: string;
}

export function jobNotFound(jobId: string): ApiError {
  return new ApiError('TRAINING_JOB_NOT_FOUND', `training job ${jobId} not found`, { jobId });
}

function invalidState(job: TrainingJob, required: readonly string[], suggestion: string): ApiError {
  return new ApiError(
    'INVALID_STATE',
    `training job ${job.id} is ${job.status}; this needs ${required.join(' or ')}`,
    {
      current_status: job.status,
      required_status: required.length === 1 ? required[0] : required,
      suggestion,
    },
  );
}

/**
 * Training jobs of an account: creation (both forms), reads, stop and resume. Placement goes through the
 * Launcher (gang placement); the supervisor moves jobs along from what the agents report.
 */
export class TrainingService {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      accounts: AccountServices;
      fleet: Fleet;
      launcher: Launcher;
      reports: ReportReader;
      recipes: TrainingRecipes;
      logger: Logger;
      /** Told of each change the supervisor should act on now rather than at its next pass. */
      changed: Signal;
    },
  ) {}

  private get db() {
    return this.d.db;
  }

  async requireAccess(actor: Actor, permission: 'read' | 'execute'): Promise<void> {
    // Training runs on the account's GPUs: the role's clusters scope covers it (roles.ts).
    await this.d.accounts.access.require(actor, { permission, scope: 'clusters' });
  }

  /**
   * A job as an account resource, like a cluster: read on a teammate's job comes with the role; changing
   * it (stop, resume, tune, their stops and deploys) needs write on it, which a member holds on their own
   * jobs, a team manager on all, and anyone else only through a grant or a share (403 otherwise).
   */
  async requireJob(actor: Actor, jobId: string, permission: 'read' | 'write'): Promise<TrainingJob> {
    const job = await this.find(actor.principal.accountId, jobId);
    await this.d.accounts.access.require(actor, {
      permission,
      scope: 'clusters',
      resourceId: job.id,
      fallback: {
        id: job.id,
        accountId: job.accountId,
        type: 'training_job',
        name: job.name,
        ownerId: job.createdById ?? '',
        createdAt: job.createdAt,
        deletedAt: null,
      },
      action: `training_job_${permission}_attempt`,
    });
    return job;
  }

  async find(accountId: string, jobId: string): Promise<TrainingJob> {
    const row = await this.db.prisma.trainingJob.findFirst({ where: { id: jobId, accountId } });
    if (!row) throw jobNotFound(jobId);
    return row;
  }

  // ---- create

  async create(actor: Actor, body: CreateJobRequest) {
    await this.requireAccess(actor, 'execute');
    const defaults = await this.d.accounts.settings.createDefaults(actor.principal.accountId);
    const imageGiven = !isShortForm(body) && (body as FullJobRequest).config?.['image'] !== undefined;
    // Managed training (baseModel, architecture or strategy and no image of its own) runs its recipe.
    const input = await this.d.recipes.apply(jobInputOf(body, defaults.gpuType), imageGiven);
    await this.d.accounts.computeHours.assertBelow(actor, 'training jobs');
    const job = await this.createFromInput(
      { accountId: actor.principal.accountId, userId: actor.principal.userId },
      input,
      {},
    );
    // In the resource directory, so shares and per-resource grants can name it.
    await this.d.accounts.resources.register(actor, { id: job.id, name: job.name, type: 'training_job' });
    if (input.form === 'short') return viewShortCreated(job, await this.currentPrice(job.gpuType));
    return this.view(job);
  }

  /**
   * Stores the job and places it at once when the fleet has room (queued otherwise). No host that could
   * ever fit it: the job is not kept, 422 INSUFFICIENT_RESOURCES with the GPU types the fleet has.
   */
  async createFromInput(
    owner: JobOwner,
    input: JobInput,
    extra: { tuneId?: string; trialNumber?: number },
  ): Promise<TrainingJob> {
    const dataset = input.datasetId
      ? await this.db.prisma.dataset.findFirst({ where: { id: input.datasetId, accountId: owner.accountId } })
      : null;
    if (!dataset) {
      throw new ApiError('DATASET_NOT_FOUND', `dataset ${input.datasetId} not found`, {
        datasetId: input.datasetId,
      });
    }
    if (dataset.status !== 'ready') {
      throw new ApiError('CONFIGURATION_ERROR', `dataset ${dataset.id} is ${dataset.status}, not ready`, {
        field: 'datasetId',
        reason: `the dataset is ${dataset.status}; a job needs a ready dataset`,
      });
    }
    const now = this.d.clock.now();
    const id = newId('job');
    const config = input.customCode === null ? input.config : { ...input.config };
    await this.db.prisma.trainingJob.create({
      data: {
        id,
        accountId: owner.accountId,
        createdById: owner.userId,
        name: input.name,
        description: input.description,
        modelType: input.modelType,
        datasetId: dataset.id,
        tags: input.tags,
        status: 'queued',
        statusReason: 'waiting for placement',
        config: config as Prisma.InputJsonValue,
        parameters: input.parameters as Prisma.InputJsonValue,
        gpuType: input.gpuType,
        gpusPerWorker: input.gpusPerWorker,
        workers: input.workers,
        priority: input.priority,
        image: input.image,
        command: input.command,
        form: input.form,
        tuneId: extra.tuneId ?? null,
        trialNumber: extra.trialNumber ?? null,
        attempt: 1,
        queuedAt: now,
        createdAt: now,
        updatedAt: now,
      },
    });
    const outcome = await this.place(id);
    if (outcome.kind === 'impossible') {
      await this.db.prisma.trainingJob.delete({ where: { id } });
      throw new ApiError(
        'INSUFFICIENT_RESOURCES',
        `no set of hosts could ever fit ${input.workers} worker(s) of ${input.gpusPerWorker} x ${input.gpuType}`,
        {
          requestedGpuType: input.gpuType.toLowerCase(),
          availableGpuTypes: outcome.availableGpuTypes.map((t) => t.toLowerCase()),
          requestedWorkers: input.workers,
          gpusPerWorker: input.gpusPerWorker,
        },
      );
    }
    return this.db.prisma.trainingJob.findUniqueOrThrow({ where: { id } });
  }

  /**
   * One placement attempt for a queued job. Before concluding impossible the capacity index is synced
   * once (a host may have joined since the last sync).
   */
  async place(jobId: string): Promise<LaunchOutcome> {
    const job = await this.db.prisma.trainingJob.findUnique({ where: { id: jobId } });
    if (job?.status !== 'queued') return { kind: 'gone' };
    const dataset = job.datasetId
      ? await this.db.prisma.dataset.findUnique({ where: { id: job.datasetId }, select: { format: true } })
      : null;
    const checkpoint = job.resumeFrom
      ? await this.db.prisma.trainingCheckpoint.findUnique({ where: { id: job.resumeFrom } })
      : null;
    const resumePath = checkpoint ? `${CHECKPOINT_DIR}/${checkpoint.path}` : null;
    const specOf: WorkerSpecOf = (row, worker, rendezvous) =>
      workerSpec(row, worker, row.attempt, resumePath, dataset?.format ?? null, rendezvous);
    let outcome = await this.d.launcher.place(jobId, specOf);
    if (outcome.kind === 'impossible') {
      await syncCapacity(this.db);
      outcome = await this.d.launcher.place(jobId, specOf);
    }
    if (outcome.kind === 'busy') {
      await this.db.prisma.trainingJob.updateMany({
        where: { id: jobId, status: 'queued' },
        data: {
          statusReason: `waiting for ${job.workers} worker(s) of ${job.gpusPerWorker} x ${job.gpuType} to fit at once`,
        },
      });
    }
    if (outcome.kind === 'placed') {
      this.d.logger.info({ jobId, hosts: outcome.workers.map((w) => w.hostId) }, 'training job placed');
    }
    return outcome;
  }

  /** Reads the trainer reports that arrived for the job since the last read. */
  async drainReports(jobId: string): Promise<number> {
    return this.d.reports.drain(jobId);
  }

  // ---- read

  async currentPrice(gpuType: string): Promise<number | null> {
    const price = await this.db.prisma.gpuPrice.findUnique({ where: { gpuType } });
    return price ? price.hourlyRate : null;
  }

  async view(job: TrainingJob) {
    const now = this.d.clock.now();
    const [usage, checkpoints, price] = await Promise.all([
      loadJobUsage(this.db, [job], now),
      this.db.prisma.trainingCheckpoint.findMany({
        where: { jobId: job.id },
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      }),
      this.currentPrice(job.gpuType),
    ]);
    return viewJob(job, usage.get(job.id), checkpoints, price, now);
  }

  async get(actor: Actor, jobId: string) {
    await this.requireAccess(actor, 'read');
    const job = await this.requireJob(actor, jobId, 'read');
    // Reports that arrived since the last supervisor pass are shown at once.
    if (['pending', 'running', 'stopping'].includes(job.status)) {
      await this.d.reports.drain(job.id).catch(() => 0);
      return this.view(await this.find(actor.principal.accountId, jobId));
    }
    return this.view(job);
  }

  async list(actor: Actor, query: ListJobsQuery) {
    await this.requireAccess(actor, 'read');
    const limit = query.limit ?? 50;
    const offset = query.offset ?? 0;
    const direction = query.order ?? 'desc';
    const where: Prisma.TrainingJobWhereInput = {
      accountId: actor.principal.accountId,
      ...(query.status ? { status: query.status } : {}),
      ...(query.modelType ? { modelType: query.modelType } : {}),
      ...(query.tuneId ? { tuneId: query.tuneId } : {}),
    };
    const [total, rows] = await Promise.all([
      this.db.prisma.trainingJob.count({ where }),
      this.db.prisma.trainingJob.findMany({
        where,
        orderBy: listOrderBy(query.sort, direction),
        take: limit,
        skip: offset,
      }),
    ]);
    const usage = await loadJobUsage(this.db, rows, this.d.clock.now());
    return {
      jobs: rows.map((r) => viewJobListItem(r, usage.get(r.id))),
      pagination: { total, limit, offset, hasMore: offset + rows.length < total },
    };
  }

  // ---- stop and resume

  async stop(actor: Actor, jobId: string, body: { saveCheckpoint?: boolean; reason?: string }) {
    await this.requireAccess(actor, 'execute');
    const job = await this.requireJob(actor, jobId, 'write');
    await this.stopJob(job, body.saveCheckpoint ?? true, body.reason ?? null);
    return this.view(await this.find(actor.principal.accountId, jobId));
  }

  /**
   * queued: cancelled at once (it never ran). pending or running: stopping — every worker is signalled
   * (SIGTERM to checkpoint and exit, or SIGKILL without a checkpoint); the supervisor makes it stopped once
   * the containers are gone. stopping: nothing more. Finished jobs: 400 INVALID_STATE.
   */
  async stopJob(job: TrainingJob, saveCheckpoint: boolean, reason: string | null): Promise<void> {
    const now = this.d.clock.now();
    if (job.status === 'stopping') return;
    if (job.status === 'queued') {
      const changed = await this.db.prisma.trainingJob.updateMany({
        where: { id: job.id, status: 'queued' },
        data: {
          status: 'cancelled',
          statusReason: `stopped before it was placed${reason ? `: ${reason}` : ''}`,
          stopRequest: { saveCheckpoint, reason, at: now.toISOString() },
          completedAt: now,
          updatedAt: now,
        },
      });
      if (changed.count > 0) {
        this.d.changed.notify();
        return;
      }
      return this.stopJob(
        await this.db.prisma.trainingJob.findUniqueOrThrow({ where: { id: job.id } }),
        saveCheckpoint,
        reason,
      );
    }
    if (job.status !== 'pending' && job.status !== 'running') {
      throw invalidState(
        job,
        ['queued', 'pending', 'running'],
        'only a job that is waiting or running can be stopped',
      );
    }
    const changed = await this.db.prisma.trainingJob.updateMany({
      where: { id: job.id, status: job.status, attempt: job.attempt },
      data: {
        status: 'stopping',
        statusReason: saveCheckpoint
          ? 'signalled SIGTERM: waiting for the checkpoint and exit'
          : 'signalled SIGKILL',
        stopRequest: { saveCheckpoint, reason, at: now.toISOString() },
        updatedAt: now,
      },
    });
    if (changed.count === 0) {
      return this.stopJob(
        await this.db.prisma.trainingJob.findUniqueOrThrow({ where: { id: job.id } }),
        saveCheckpoint,
        reason,
      );
    }
    await this.signal(job, saveCheckpoint ? 'SIGTERM' : 'SIGKILL');
    this.d.changed.notify();
  }

  /** Signals every worker's container through its agent; an unreachable agent is left to the supervisor's deadline. */
  async signal(job: TrainingJob, signal: 'SIGTERM' | 'SIGKILL'): Promise<void> {
    const workers = (job.placement ?? []) as unknown as PlacedWorker[];
    await Promise.all(
      workers.map(async (w) => {
        try {
          await this.d.fleet.agents.sendCommand(
            w.hostId,
            { name: 'signal_workload', workloadId: w.workloadId, signal },
            15_000,
          );
        } catch (error) {
          this.d.logger.warn(
            { jobId: job.id, workloadId: w.workloadId, err: (error as Error).message },
            'training worker could not be signalled',
          );
        }
      }),
    );
  }

  async resume(actor: Actor, jobId: string, body: { checkpointId?: string }) {
    await this.requireAccess(actor, 'execute');
    const job = await this.requireJob(actor, jobId, 'write');
    if (!(RESUMABLE_STATUSES as readonly string[]).includes(job.status)) {
      throw invalidState(
        job,
        RESUMABLE_STATUSES,
        'stop the job first; a finished job is resumed from its checkpoints',
      );
    }
    await this.d.accounts.computeHours.assertBelow(actor, 'training jobs');
    // Reports still in the log (the checkpoint written on SIGTERM) count before "latest" is chosen.
    await this.d.reports.drain(job.id);
    let checkpoint = null;
    if (body.checkpointId) {
      checkpoint = await this.db.prisma.trainingCheckpoint.findFirst({
        where: { id: body.checkpointId, jobId: job.id },
      });
      if (!checkpoint) {
        throw new ApiError(
          'CHECKPOINT_NOT_FOUND',
          `checkpoint ${body.checkpointId} is not one of job ${job.id}`,
          {
            jobId: job.id,
            checkpointId: body.checkpointId,
          },
        );
      }
    } else {
      checkpoint = await this.db.prisma.trainingCheckpoint.findFirst({
        where: { jobId: job.id },
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
      });
    }
    const now = this.d.clock.now();
    const changed = await this.db.prisma.trainingJob.updateMany({
      where: { id: job.id, status: job.status, attempt: job.attempt },
      data: {
        status: 'queued',
        statusReason: checkpoint
          ? `resuming from checkpoint ${checkpoint.id}`
          : 'restarting without a checkpoint',
        attempt: job.attempt + 1,
        resumeFrom: checkpoint?.id ?? null,
        placement: [],
        stopRequest: Prisma.DbNull,
        exitCode: null,
        completedAt: null,
        queuedAt: now,
        updatedAt: now,
      },
    });
    if (changed.count === 0)
      throw invalidState(await this.find(job.accountId, job.id), RESUMABLE_STATUSES, 'try again');
    const outcome = await this.place(job.id);
    if (outcome.kind === 'impossible') {
      // Rank 0 must return to the host holding its checkpoints, and that host is gone.
      await this.db.prisma.trainingJob.updateMany({
        where: { id: job.id, status: 'queued' },
        data: {
          status: 'failed',
          statusReason: 'the host holding the checkpoints is gone',
          completedAt: now,
        },
      });
    }
    this.d.changed.notify();
    return this.view(await this.find(job.accountId, job.id));
  }
}

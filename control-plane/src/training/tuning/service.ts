import { ApiError, newId } from '@anvil/shared';
import type { Actor } from '../../accounts/access.ts';
import type { Clock } from '../../auth/clock.ts';
import type { Prisma, TrainingJob, TuningJob } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import { snakeCase, withParameters } from '../config.ts';
import { jobNotFound, type TrainingService } from '../service.ts';
import { loadJobUsage, type ParameterValue } from '../summary.ts';
import { bestOf, convergence, recommendations, type TrialFacts } from './analysis.ts';
import type { TuningDriver } from './driver.ts';
import { ACTIVE, inputOfJob, lastValues, type SamplerState, type TuneSettings } from './records.ts';
import { type HyperbandConfig, hyperbandTrialCount } from './samplers.ts';
import { type Algorithm, checkAlgorithm, gridSize, parseSearchSpace } from './search-space.ts';

export interface TuneRequest {
  objective?: 'minimize' | 'maximize';
  metric?: string;
  search_space?: Record<string, unknown>;
  algorithm?: Algorithm;
  max_trials?: number;
  max_concurrent?: number;
  early_stopping?: { metric?: string; patience?: number; min_delta?: number };
  budget?: { max_gpu_hours?: number; max_cost?: number };
  hyperband_config?: { max_epochs?: number; reduction_factor?: number; min_epochs?: number };
  // short form
  hyperparameters?: Record<string, unknown>;
  searchStrategy?: Algorithm;
  maxTrials?: number;
}

const INTEGER_NAMES = new Set(['batch_size', 'epochs', 'warmup_steps', 'gradient_accumulation_steps']);

export function tuneNotFound(tuneId: string): ApiError {
  return new ApiError('TUNING_JOB_NOT_FOUND', `tuning job ${tuneId} not found`, { tuneId });
}

/**
 * The short form's hyperparameters as a search space: an array is a choice; {min, max} is log_uniform for
 * learning rates, int_uniform for integer parameters (batch size, epochs, ...), uniform otherwise; an
 * object with a type is taken as it is; a single value is a choice of one.
 */
export function shortFormSpace(hyperparameters: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [raw, value] of Object.entries(hyperparameters)) {
    const name = snakeCase(raw);
    if (Array.isArray(value)) out[name] = { type: 'choice', values: value };
    else if (typeof value === 'object' && value !== null && 'type' in value) out[name] = value;
    else if (typeof value === 'object' && value !== null) {
      const { min, max } = value as { min?: unknown; max?: unknown };
      const type =
        name === 'learning_rate' ? 'log_uniform' : INTEGER_NAMES.has(name) ? 'int_uniform' : 'uniform';
      out[name] = { type, min, max };
    } else out[name] = { type: 'choice', values: [value] };
  }
  return out;
}

/**
 * Tuning jobs as the API sees them: a search over a base job's hyperparameters is created, read, stopped and
 * its best trial deployed here; the driver (driver.ts) runs the search.
 */
export class TuningService {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      training: TrainingService;
      driver: TuningDriver;
      /** Brings the training supervisor's next pass forward (new trials, stops, a deployed job). */
      kick: () => void;
    },
  ) {}

  private get db() {
    return this.d.db;
  }

  // ---- create

  async create(actor: Actor, jobId: string, body: TuneRequest) {
    await this.d.training.requireAccess(actor, 'execute');
    const base = await this.d.training.requireJob(actor, jobId, 'write');
    const short = body.search_space === undefined && body.hyperparameters !== undefined;
    const algorithm: Algorithm = (short ? body.searchStrategy : body.algorithm) ?? 'random';
    const rawSpace = short ? shortFormSpace(body.hyperparameters ?? {}) : (body.search_space ?? {});
    if (!short) {
      for (const field of ['objective', 'metric', 'search_space', 'algorithm'] as const) {
        if (body[field] === undefined) {
          throw new ApiError('VALIDATION_ERROR', `body field "${field}" is required`, {
            field,
            reason: 'is required (full form: objective, metric, search_space, algorithm)',
            location: 'body',
          });
        }
      }
    }
    const space = parseSearchSpace(rawSpace);
    checkAlgorithm(algorithm, space);
    const hyperband: HyperbandConfig | null =
      algorithm === 'hyperband'
        ? {
            maxEpochs:
              body.hyperband_config?.max_epochs ??
              (typeof base.parameters === 'object' &&
              typeof (base.parameters as Record<string, unknown>)['epochs'] === 'number'
                ? ((base.parameters as Record<string, number>)['epochs'] ?? 27)
                : 27),
            reductionFactor: body.hyperband_config?.reduction_factor ?? 3,
            minEpochs: body.hyperband_config?.min_epochs ?? 1,
          }
        : null;
    if (hyperband && (hyperband.minEpochs > hyperband.maxEpochs || hyperband.reductionFactor < 2)) {
      throw new ApiError(
        'INVALID_SEARCH_SPACE',
        'hyperband_config needs min_epochs <= max_epochs and reduction_factor >= 2',
        {
          parameter: 'hyperband_config',
          reason: 'min_epochs <= max_epochs and reduction_factor >= 2',
        },
      );
    }
    let maxTrials = (short ? body.maxTrials : body.max_trials) ?? 50;
    if (algorithm === 'grid') maxTrials = Math.min(maxTrials, gridSize(space));
    if (hyperband) maxTrials = Math.min(maxTrials, hyperbandTrialCount(hyperband));
    const settings: TuneSettings = {
      maxTrials,
      maxConcurrent: body.max_concurrent ?? 4,
      earlyStopping: body.early_stopping
        ? {
            metric: body.early_stopping.metric ?? body.metric ?? 'loss',
            patience: body.early_stopping.patience ?? 3,
            minDelta: body.early_stopping.min_delta ?? 0,
          }
        : null,
      budget: { maxGpuHours: body.budget?.max_gpu_hours ?? null, maxCost: body.budget?.max_cost ?? null },
      hyperband,
      seed: Math.floor(Math.random() * 2 ** 31),
    };
    await this.checkBudget(base, settings);
    const now = this.d.clock.now();
    const id = newId('tune');
    await this.db.prisma.tuningJob.create({
      data: {
        id,
        accountId: base.accountId,
        createdById: actor.principal.userId,
        trainingJobId: base.id,
        status: 'running',
        algorithm,
        objective: body.objective ?? 'minimize',
        metric: body.metric ?? 'loss',
        searchSpace: rawSpace as Prisma.InputJsonValue,
        settings: settings as unknown as Prisma.InputJsonValue,
        form: short ? 'short' : 'full',
        createdAt: now,
        updatedAt: now,
      },
    });
    await this.d.driver.advance(id);
    this.d.kick();
    const row = await this.db.prisma.tuningJob.findUniqueOrThrow({ where: { id } });
    if (short) {
      const view = await this.view(row);
      return { tuningJobId: id, status: 'started', estimatedDuration: view.estimatedDuration };
    }
    return this.view(row);
  }

  /**
   * INSUFFICIENT_BUDGET when the search's estimated cost exceeds the budget: per trial, the base job's
   * billed GPU-hours and cost (a real run of the same configuration) when it has run, else nothing is
   * estimated at creation and the budget is enforced as trials are billed. estimatedCost = per-trial cost x
   * max_trials (GPU-hours likewise against max_gpu_hours).
   */
  private async checkBudget(base: TrainingJob, settings: TuneSettings): Promise<void> {
    const { maxCost, maxGpuHours } = settings.budget;
    if (maxCost === null && maxGpuHours === null) return;
    const usage = (await loadJobUsage(this.db, [base], this.d.clock.now())).get(base.id);
    const finished = ['completed', 'stopped', 'failed'].includes(base.status);
    if (!usage || usage.cost === null || usage.gpuHours === null || !finished) return;
    const estimatedCost = Math.round(usage.cost * settings.maxTrials * 10_000) / 10_000;
    const estimatedGpuHours = usage.gpuHours * settings.maxTrials;
    if (
      (maxCost !== null && estimatedCost > maxCost) ||
      (maxGpuHours !== null && estimatedGpuHours > maxGpuHours)
    ) {
      throw new ApiError(
        'INSUFFICIENT_BUDGET',
        `${settings.maxTrials} trials are estimated at ${estimatedCost} USD and ${estimatedGpuHours.toFixed(4)} GPU-hours`,
        {
          requestedTrials: settings.maxTrials,
          estimatedCost,
          estimatedGpuHours,
          availableBudget: { maxCost, maxGpuHours },
        },
      );
    }
  }

  // ---- read

  async find(accountId: string, tuneId: string, jobId?: string): Promise<TuningJob> {
    const row = await this.db.prisma.tuningJob.findFirst({
      where: { id: tuneId, accountId, ...(jobId ? { trainingJobId: jobId } : {}) },
    });
    if (!row) throw tuneNotFound(tuneId);
    return row;
  }

  async get(actor: Actor, jobId: string, tuneId: string) {
    await this.d.training.requireAccess(actor, 'read');
    await this.d.training.find(actor.principal.accountId, jobId).catch(() => {
      throw jobNotFound(jobId);
    });
    return this.view(await this.find(actor.principal.accountId, tuneId, jobId));
  }

  async list(actor: Actor, query: { status?: string; algorithm?: string; limit?: number; offset?: number }) {
    await this.d.training.requireAccess(actor, 'read');
    const limit = query.limit ?? 50;
    const offset = query.offset ?? 0;
    const where: Prisma.TuningJobWhereInput = {
      accountId: actor.principal.accountId,
      ...(query.status ? { status: query.status } : {}),
      ...(query.algorithm ? { algorithm: query.algorithm } : {}),
    };
    const [total, rows] = await Promise.all([
      this.db.prisma.tuningJob.count({ where }),
      this.db.prisma.tuningJob.findMany({
        where,
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: limit,
        skip: offset,
      }),
    ]);
    const views = [];
    for (const row of rows) {
      const v = await this.view(row);
      views.push({
        id: v.id,
        trainingJobId: v.trainingJobId,
        status: v.status,
        algorithm: v.algorithm,
        objective: v.objective,
        metric: v.metric,
        progress: v.progress,
        bestValue: v.results.bestValue,
        createdAt: v.createdAt,
        updatedAt: v.updatedAt,
      });
    }
    return { tuningJobs: views, pagination: { total, limit, offset, hasMore: offset + rows.length < total } };
  }

  /** Every trial's facts: last reported metrics, its objective value, billed duration and cost. */
  private async trials(tune: TuningJob): Promise<TrialFacts[]> {
    const jobs = await this.db.prisma.trainingJob.findMany({
      where: { tuneId: tune.id },
      orderBy: [{ trialNumber: 'asc' }],
    });
    const usage = await loadJobUsage(this.db, jobs, this.d.clock.now());
    const points = await this.db.prisma.trainingMetric.findMany({
      where: { jobId: { in: jobs.map((j) => j.id) } },
      orderBy: { id: 'asc' },
    });
    const checkpoints = await this.db.prisma.trainingCheckpoint.findMany({
      where: { jobId: { in: jobs.map((j) => j.id) } },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    const state = tune.samplerState as SamplerState;
    const early = new Set(state.earlyStopped ?? []);
    return jobs.map((job) => {
      const metrics = lastValues(points.filter((p) => p.jobId === job.id));
      const u = usage.get(job.id);
      const gpus = job.gpusPerWorker * job.workers;
      const outcome: TrialFacts['outcome'] = ACTIVE.includes(job.status)
        ? 'running'
        : job.status === 'completed'
          ? 'completed'
          : job.status === 'failed'
            ? 'failed'
            : job.status === 'stopped' && early.has(job.trialNumber ?? -1)
              ? 'early_stopped'
              : 'cancelled';
      return {
        id: job.id,
        number: job.trialNumber ?? 0,
        outcome,
        status: job.status,
        parameters: job.parameters as Record<string, ParameterValue>,
        metrics,
        value: metrics[tune.metric] ?? null,
        duration:
          u?.gpuHours === null || u?.gpuHours === undefined ? null : Math.round((u.gpuHours / gpus) * 3600),
        cost: u?.cost ?? null,
        finishedAt: job.completedAt,
        modelId: checkpoints.filter((c) => c.jobId === job.id).at(-1)?.id ?? null,
      };
    });
  }

  async view(tune: TuningJob) {
    const settings = tune.settings as unknown as TuneSettings;
    const trials = await this.trials(tune);
    const best = bestOf(trials, tune.objective);
    const analysis = convergence(trials, tune.objective);
    const space = parseSearchSpace(tune.searchSpace as Record<string, unknown>);
    const finished = trials.filter((t) => t.outcome !== 'running');
    const running = trials.length - finished.length;
    const base = await this.db.prisma.trainingJob.findUnique({ where: { id: tune.trainingJobId } });
    const basePoints = base
      ? await this.db.prisma.trainingMetric.findMany({ where: { jobId: base.id }, orderBy: { id: 'asc' } })
      : [];
    const baseline = lastValues(basePoints)[tune.metric] ?? null;
    const improvement =
      best && baseline !== null && baseline !== 0
        ? Math.round(
            ((tune.objective === 'maximize' ? best.value! - baseline : baseline - best.value!) /
              Math.abs(baseline)) *
              10_000,
          ) / 100
        : null;
    const durations = finished.map((t) => t.duration).filter((d): d is number => d !== null);
    const meanDuration =
      durations.length > 0 ? durations.reduce((a, b) => a + b, 0) / durations.length : null;
    const remaining = Math.max(0, settings.maxTrials - finished.length);
    const estimatedDuration =
      meanDuration === null
        ? null
        : Math.round((meanDuration * remaining) / Math.max(1, settings.maxConcurrent));
    const sum = (values: (number | null)[]) =>
      values.some((v) => v !== null) ? values.reduce<number>((a, v) => a + (v ?? 0), 0) : null;
    const trialView = (t: TrialFacts) => ({
      id: t.id,
      trialNumber: t.number,
      parameters: t.parameters,
      metrics: t.metrics,
      value: t.value,
      status: t.outcome === 'running' ? t.status : t.outcome,
      duration: t.duration,
      cost: t.cost,
    });
    const done = ['completed', 'failed', 'cancelled'].includes(tune.status);
    return {
      id: tune.id,
      trainingJobId: tune.trainingJobId,
      status: tune.status,
      statusReason: tune.statusReason,
      algorithm: tune.algorithm,
      objective: tune.objective,
      metric: tune.metric,
      searchSpace: tune.searchSpace as Record<string, unknown>,
      settings: {
        maxTrials: settings.maxTrials,
        maxConcurrent: settings.maxConcurrent,
        earlyStopping: settings.earlyStopping,
        budget: settings.budget,
        hyperbandConfig: settings.hyperband,
      },
      progress: {
        completedTrials: finished.length,
        totalTrials: settings.maxTrials,
        runningTrials: running,
        bestValue: best?.value ?? null,
        percentage: Math.round((finished.length / Math.max(1, settings.maxTrials)) * 10_000) / 100,
      },
      bestTrial: best
        ? {
            id: best.id,
            parameters: best.parameters,
            metrics: best.metrics,
            duration: best.duration,
            cost: best.cost,
            modelId: best.modelId,
          }
        : null,
      results: {
        totalTrials: trials.length,
        completedTrials: trials.filter((t) => t.outcome === 'completed' || t.outcome === 'early_stopped')
          .length,
        failedTrials: trials.filter((t) => t.outcome === 'failed').length,
        bestValue: best?.value ?? null,
        baselineValue: baseline,
        improvementOverBaseline: improvement,
        totalDuration: sum(trials.map((t) => t.duration)),
        totalCost:
          sum(trials.map((t) => t.cost)) === null
            ? null
            : Math.round(sum(trials.map((t) => t.cost))! * 10_000) / 10_000,
      },
      trials: trials.map(trialView),
      convergenceAnalysis: analysis,
      recommendations: recommendations(trials, space, best, analysis.converged),
      estimatedDuration: done ? 0 : estimatedDuration,
      estimatedCompletion:
        done || estimatedDuration === null
          ? null
          : new Date(this.d.clock.now().getTime() + estimatedDuration * 1000).toISOString(),
      createdAt: tune.createdAt.toISOString(),
      updatedAt: tune.updatedAt.toISOString(),
      completedAt: tune.completedAt?.toISOString() ?? null,
    };
  }

  // ---- stop and deploy

  async stop(
    actor: Actor,
    jobId: string,
    tuneId: string,
    body: { reason?: string; complete_running_trials?: boolean },
  ) {
    await this.d.training.requireAccess(actor, 'execute');
    await this.d.training.requireJob(actor, jobId, 'write');
    const tune = await this.find(actor.principal.accountId, tuneId, jobId);
    if (!['pending', 'running', 'stopping'].includes(tune.status)) {
      throw new ApiError('INVALID_STATE', `tuning job ${tune.id} is ${tune.status}`, {
        current_status: tune.status,
        required_status: ['pending', 'running'],
        suggestion: 'only a running tuning job can be stopped',
      });
    }
    const complete = body.complete_running_trials ?? false;
    const now = this.d.clock.now();
    await this.db.prisma.tuningJob.update({
      where: { id: tune.id },
      data: {
        status: 'stopping',
        statusReason: complete
          ? 'stopping: running trials may complete'
          : 'stopping: running trials are stopped',
        stopRequest: { reason: body.reason ?? null, completeRunningTrials: complete, at: now.toISOString() },
        updatedAt: now,
      },
    });
    // The step stops the running trials unless they may complete.
    await this.d.driver.advance(tune.id);
    this.d.kick();
    return this.view(await this.find(actor.principal.accountId, tuneId));
  }

  async deployBest(
    actor: Actor,
    jobId: string,
    tuneId: string,
    body: {
      name?: string;
      epochs?: number;
      use_best_trial?: string;
      override_parameters?: Record<string, unknown>;
    },
  ) {
    await this.d.training.requireAccess(actor, 'execute');
    await this.d.training.requireJob(actor, jobId, 'write');
    const tune = await this.find(actor.principal.accountId, tuneId, jobId);
    const trials = await this.trials(tune);
    const source = body.use_best_trial
      ? trials.find((t) => t.id === body.use_best_trial)
      : bestOf(trials, tune.objective);
    if (!source) {
      if (body.use_best_trial) {
        throw new ApiError('TRAINING_JOB_NOT_FOUND', `${body.use_best_trial} is not a trial of ${tune.id}`, {
          jobId: body.use_best_trial,
        });
      }
      throw new ApiError(
        'INVALID_STATE',
        `tuning job ${tune.id} has no finished trial with a ${tune.metric} value yet`,
        {
          current_status: tune.status,
          required_status: 'a finished trial',
          suggestion: 'wait for a trial to complete',
        },
      );
    }
    const base = await this.d.training.find(actor.principal.accountId, tune.trainingJobId);
    const overrides: Record<string, ParameterValue> = {
      ...source.parameters,
      ...((body.override_parameters ?? {}) as Record<string, ParameterValue>),
      ...(body.epochs !== undefined ? { epochs: body.epochs } : {}),
    };
    const input = withParameters(
      { ...inputOfJob(base), name: body.name ?? `${base.name} (best of ${tune.id})`.slice(0, 100) },
      overrides,
    );
    const job = await this.d.training.createFromInput(
      { accountId: actor.principal.accountId, userId: actor.principal.userId },
      input,
      {},
    );
    this.d.kick();
    return { ...(await this.d.training.view(job)), sourceTrialId: source.id, tuningJobId: tune.id };
  }
}

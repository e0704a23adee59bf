import { ApiError, newId } from '@anvil/shared';
import type { Actor } from '../../auth/access.ts';
import type { Clock } from '../../auth/clock.ts';
import type { Prisma, TrainingJob, TuningJob } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import { type JobInput, snakeCase, withParameters } from '../config.ts';
import { jobNotFound, type TrainingLogger, type TrainingService } from '../service.ts';
import { loadJobUsage, type ParameterValue } from '../summary.ts';
import { bestOf, convergence, recommendations, type TrialFacts } from './analysis.ts';
import {
  gridPoint,
  type HyperbandConfig,
  hyperbandBrackets,
  hyperbandTrialCount,
  randomPoint,
  rng,
  sequentialPoint,
  type TrialPoint,
} from './samplers.ts';
import {
  type Algorithm,
  applyConditions,
  checkAlgorithm,
  gridSize,
  parseSearchSpace,
  type SearchSpace,
} from './search-space.ts';

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

export interface TuneSettings {
  maxTrials: number;
  maxConcurrent: number;
  earlyStopping: { metric: string; patience: number; minDelta: number } | null;
  budget: { maxGpuHours: number | null; maxCost: number | null };
  hyperband: HyperbandConfig | null;
  seed: number;
}

interface TrialMeta {
  bracket?: number;
  rung?: number;
  config?: number;
}

interface SamplerState {
  gridNext?: number;
  trials?: Record<string, TrialMeta>;
  earlyStopped?: number[];
  hyperband?: {
    bracket: number;
    rung: number;
    members: { config: number; params: Record<string, ParameterValue> }[];
  };
  nextConfig?: number;
}

const ACTIVE = ['queued', 'pending', 'running', 'stopping'];
/** How long a just-finished trial without a value may still be waiting for its last reports. */
const SETTLE_MS = 15_000;
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

/** A job row as the input its trials are made from (their parameters replaced). */
export function inputOfJob(job: TrainingJob): JobInput {
  return {
    name: job.name,
    description: job.description,
    modelType: job.modelType,
    datasetId: job.datasetId,
    tags: job.tags,
    config: job.config as Record<string, unknown>,
    parameters: job.parameters as Record<string, ParameterValue>,
    gpuType: job.gpuType as JobInput['gpuType'],
    gpusPerWorker: job.gpusPerWorker,
    workers: job.workers,
    priority: job.priority,
    image: job.image,
    command: job.command,
    customCode: null,
    form: 'full',
  };
}

function lastValues(points: { values: unknown }[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of points) Object.assign(out, p.values as Record<string, number>);
  return out;
}

/**
 * Tuning jobs: a search over a base job's hyperparameters where every trial is a real training job (tune_id
 * set) with the sampled parameters. advanceAll runs after every training supervisor pass: it stops trials
 * that stopped improving (early_stopping) or overrun the budget, launches new ones up to max_concurrent and
 * max_trials, and finishes the search.
 */
export class TuningService {
  #kick: () => void = () => {};
  #advancing = false;
  readonly #steps = new Map<string, Promise<void>>();

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      training: TrainingService;
      logger: () => TrainingLogger;
    },
  ) {}

  onKick(kick: () => void): void {
    this.#kick = kick;
  }

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
    await this.advance(id);
    this.#kick();
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
    if (!complete) await this.stopTrials(tune.id, 'tuning job stopped');
    await this.advance(tune.id);
    this.#kick();
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
    this.#kick();
    return { ...(await this.d.training.view(job)), sourceTrialId: source.id, tuningJobId: tune.id };
  }

  private async stopTrials(tuneId: string, reason: string, onlyNumbers?: Set<number>): Promise<void> {
    const active = await this.db.prisma.trainingJob.findMany({ where: { tuneId, status: { in: ACTIVE } } });
    for (const job of active) {
      if (onlyNumbers && !onlyNumbers.has(job.trialNumber ?? -1)) continue;
      if (job.status === 'stopping') continue;
      await this.d.training.stopJob(job, false, reason).catch((error: unknown) => {
        // Logged, not thrown: the other trials are still stopped; this one keeps running (and billing).
        this.d.logger().error({ err: error, tuneId, trialId: job.id, reason }, 'stopping a trial failed');
      });
    }
  }

  // ---- the loop

  /** Advances every open tuning job; true when there are open ones (the supervisor comes back soon). */
  async advanceAll(): Promise<boolean> {
    if (this.#advancing) return true;
    this.#advancing = true;
    try {
      const open = await this.db.prisma.tuningJob.findMany({
        where: { status: { in: ['pending', 'running', 'stopping'] } },
        select: { id: true },
        take: 200,
      });
      for (const { id } of open) {
        await this.advance(id).catch((error: unknown) =>
          this.d
            .logger()
            .error({ tuneId: id, err: (error as Error).message }, 'tuning job could not advance'),
        );
      }
      return open.length > 0;
    } finally {
      this.#advancing = false;
    }
  }

  /**
   * One step of a tuning job: early stopping, budget, new trials, the end. Steps of one tuning job run one
   * at a time in this process (the create request and the supervisor both call it); across replicas the
   * unique (tune_id, trial_number) index lets only one of two racing steps create a trial.
   */
  advance(tuneId: string): Promise<void> {
    const previous = this.#steps.get(tuneId) ?? Promise.resolve();
    const next = previous.then(() => this.#advance(tuneId));
    const settled = next.catch(() => {});
    this.#steps.set(tuneId, settled);
    void settled.then(() => {
      if (this.#steps.get(tuneId) === settled) this.#steps.delete(tuneId);
    });
    return next;
  }

  async #advance(tuneId: string): Promise<void> {
    const tune = await this.db.prisma.tuningJob.findUnique({ where: { id: tuneId } });
    if (!tune || !['pending', 'running', 'stopping'].includes(tune.status)) return;
    const settings = tune.settings as unknown as TuneSettings;
    const state = { ...(tune.samplerState as SamplerState) };
    const jobs = await this.db.prisma.trainingJob.findMany({
      where: { tuneId },
      orderBy: { trialNumber: 'asc' },
    });
    const active = jobs.filter((j) => ACTIVE.includes(j.status));
    const now = this.d.clock.now();
    let reason: string | null = null;

    if (settings.earlyStopping) await this.earlyStop(tune, settings, state, active);

    const usage = await loadJobUsage(this.db, jobs, now);
    const spentCost = [...usage.values()].reduce((a, u) => a + (u.cost ?? 0), 0);
    const spentHours = [...usage.values()].reduce((a, u) => a + (u.gpuHours ?? 0), 0);
    const { maxCost, maxGpuHours } = settings.budget;
    const overBudget =
      (maxCost !== null && spentCost >= maxCost) || (maxGpuHours !== null && spentHours >= maxGpuHours);
    if (overBudget && tune.status !== 'stopping') {
      await this.stopTrials(tuneId, 'tuning budget exhausted');
      reason = `budget exhausted: ${Math.round(spentCost * 10_000) / 10_000} USD, ${spentHours.toFixed(4)} GPU-hours`;
    }

    let launched = jobs.length;
    let exhausted = false;
    if (tune.status !== 'stopping' && !overBudget) {
      let slots = settings.maxConcurrent - active.length;
      const base = await this.db.prisma.trainingJob.findUnique({ where: { id: tune.trainingJobId } });
      if (!base) {
        await this.finish(tune, 'failed', 'the base training job is gone');
        return;
      }
      const space = parseSearchSpace(tune.searchSpace as Record<string, unknown>);
      const points = await this.points(tune, jobs);
      while (slots > 0 && launched < settings.maxTrials) {
        const proposal = this.propose(
          tune.algorithm as Algorithm,
          space,
          settings,
          state,
          points,
          jobs,
          launched,
        );
        if (proposal === 'wait') break;
        if (proposal === null) {
          exhausted = true;
          break;
        }
        const number = launched + 1;
        const params = applyConditions(space, proposal.params);
        const overrides = proposal.epochs !== undefined ? { ...params, epochs: proposal.epochs } : params;
        try {
          const input = withParameters(
            {
              ...inputOfJob(base),
              name: `${base.name} trial ${number}`.slice(0, 100),
              tags: [...base.tags, `tune:${tune.id}`],
            },
            overrides,
          );
          await this.d.training.createFromInput(
            { accountId: tune.accountId, userId: tune.createdById },
            input,
            { tuneId, trialNumber: number },
          );
        } catch (error) {
          // Another replica created this trial a moment ago: its step owns the state now.
          if ((error as { code?: string }).code === 'P2002') return;
          await this.saveState(tuneId, state);
          await this.finish(
            tune,
            'failed',
            `trial ${number} could not be created: ${(error as Error).message}`,
          );
          return;
        }
        state.trials = { ...(state.trials ?? {}), [String(number)]: proposal.meta };
        points.push({ params, score: null, active: true });
        launched++;
        slots--;
      }
      if (launched >= settings.maxTrials) exhausted = true;
    }
    await this.saveState(tuneId, state);

    const stillActive = await this.db.prisma.trainingJob.count({ where: { tuneId, status: { in: ACTIVE } } });
    if (stillActive > 0) return;
    if (await this.settling(tune)) return;
    if (tune.status === 'stopping') {
      const stop = tune.stopRequest as { reason?: string | null } | null;
      await this.finish(tune, 'cancelled', `stopped${stop?.reason ? `: ${stop.reason}` : ''}`);
    } else if (overBudget) {
      await this.finish(tune, 'completed', reason ?? 'budget exhausted');
    } else if (exhausted) {
      const all = await this.db.prisma.trainingJob.findMany({ where: { tuneId }, select: { status: true } });
      const failed = all.length > 0 && all.every((j) => j.status === 'failed');
      await this.finish(
        tune,
        failed ? 'failed' : 'completed',
        failed ? 'every trial failed' : `${all.length} trials finished`,
      );
    }
  }

  /**
   * A trial that ended moments ago may still have its last reports on the way (the agent sends a
   * container's final log lines after its exit): the search waits up to SETTLE_MS for a completed trial
   * to show a value for the metric and, when the trainer reported its total steps, its last step (a
   * value from an earlier step would rank the trial by a loss it had not finished with).
   */
  private async settling(tune: TuningJob): Promise<boolean> {
    const recent = await this.db.prisma.trainingJob.findMany({
      where: { tuneId: tune.id, completedAt: { gte: new Date(this.d.clock.now().getTime() - SETTLE_MS) } },
      select: { id: true },
    });
    for (const { id } of recent) {
      await this.d.training.drainReports(id);
      const job = await this.db.prisma.trainingJob.findUnique({
        where: { id },
        select: { status: true, progress: true },
      });
      const values = await this.db.prisma.trainingMetric.findMany({
        where: { jobId: id },
        select: { values: true },
      });
      if (!values.some((v) => typeof (v.values as Record<string, unknown>)[tune.metric] === 'number'))
        return true;
      const progress = (job?.progress ?? {}) as { currentStep?: unknown; totalSteps?: unknown };
      if (
        job?.status === 'completed' &&
        typeof progress.totalSteps === 'number' &&
        (typeof progress.currentStep !== 'number' || progress.currentStep < progress.totalSteps)
      )
        return true;
    }
    return false;
  }

  private async saveState(tuneId: string, state: SamplerState): Promise<void> {
    await this.db.prisma.tuningJob.update({
      where: { id: tuneId },
      data: { samplerState: state as Prisma.InputJsonValue, updatedAt: this.d.clock.now() },
    });
  }

  private async finish(
    tune: TuningJob,
    status: 'completed' | 'failed' | 'cancelled',
    reason: string,
  ): Promise<void> {
    const now = this.d.clock.now();
    await this.db.prisma.tuningJob.updateMany({
      where: { id: tune.id, status: { in: ['pending', 'running', 'stopping'] } },
      data: { status, statusReason: reason, completedAt: now, updatedAt: now },
    });
    this.d.logger().info({ tuneId: tune.id, status, reason }, 'tuning job finished');
  }

  /** Each trial's parameters and score (the objective's last reported value; negated to maximize). */
  private async points(tune: TuningJob, jobs: TrainingJob[]): Promise<TrialPoint[]> {
    const metrics = await this.db.prisma.trainingMetric.findMany({
      where: { jobId: { in: jobs.map((j) => j.id) } },
      orderBy: { id: 'asc' },
    });
    return jobs.map((job) => {
      const value = lastValues(metrics.filter((m) => m.jobId === job.id))[tune.metric];
      const finished = !ACTIVE.includes(job.status) && job.status !== 'failed' && job.status !== 'cancelled';
      return {
        params: job.parameters as Record<string, ParameterValue>,
        score: finished && value !== undefined ? (tune.objective === 'maximize' ? -value : value) : null,
        active: ACTIVE.includes(job.status),
      };
    });
  }

  /** The next trial, 'wait' (hyperband: the rung is not finished), or null (the space is exhausted). */
  private propose(
    algorithm: Algorithm,
    space: SearchSpace,
    settings: TuneSettings,
    state: SamplerState,
    points: TrialPoint[],
    jobs: TrainingJob[],
    launched: number,
  ): { params: Record<string, ParameterValue>; meta: TrialMeta; epochs?: number } | 'wait' | null {
    const random = rng(settings.seed + launched * 7919);
    if (algorithm === 'grid') {
      const index = state.gridNext ?? 0;
      const params = gridPoint(space, index);
      if (!params) return null;
      state.gridNext = index + 1;
      return { params, meta: {} };
    }
    if (algorithm === 'hyperband') return this.proposeHyperband(space, settings, state, points, jobs, random);
    return { params: sequentialPoint(algorithm, space, points, random), meta: {} };
  }

  /**
   * Hyperband (samplers.ts, hyperbandBrackets): the current rung's configurations run with that rung's
   * epochs; once all of them finished, the best floor(n / eta) go on to the next rung; then the next bracket
   * starts with new random configurations.
   */
  private proposeHyperband(
    space: SearchSpace,
    settings: TuneSettings,
    state: SamplerState,
    points: TrialPoint[],
    jobs: TrainingJob[],
    random: () => number,
  ): { params: Record<string, ParameterValue>; meta: TrialMeta; epochs: number } | 'wait' | null {
    const brackets = hyperbandBrackets(settings.hyperband!);
    const trialsMeta = state.trials ?? {};
    for (;;) {
      let hb = state.hyperband;
      if (!hb) {
        const first = brackets[0]![0]!;
        hb = { bracket: 0, rung: 0, members: [] };
        for (let i = 0; i < first.configs; i++) {
          hb.members.push({ config: (state.nextConfig ?? 0) + i, params: randomPoint(space, random) });
        }
        state.nextConfig = (state.nextConfig ?? 0) + first.configs;
        state.hyperband = hb;
      }
      const rung = brackets[hb.bracket]?.[hb.rung];
      if (!rung) return null;
      const launchedHere = new Map<number, number>();
      for (const [number, meta] of Object.entries(trialsMeta)) {
        if (meta.bracket === hb.bracket && meta.rung === hb.rung && meta.config !== undefined) {
          launchedHere.set(meta.config, Number(number));
        }
      }
      const next = hb.members.find((m) => !launchedHere.has(m.config));
      if (next) {
        return {
          params: next.params,
          meta: { bracket: hb.bracket, rung: hb.rung, config: next.config },
          epochs: rung.epochs,
        };
      }
      const scoreOf = (config: number): number | null => {
        const number = launchedHere.get(config);
        const job = jobs.find((j) => j.trialNumber === number);
        if (!job) return null;
        return points[jobs.indexOf(job)]?.score ?? null;
      };
      const pending = hb.members.some((m) => {
        const number = launchedHere.get(m.config);
        const job = jobs.find((j) => j.trialNumber === number);
        return !job || ACTIVE.includes(job.status);
      });
      if (pending) return 'wait';
      const nextRung = brackets[hb.bracket]![hb.rung + 1];
      if (nextRung) {
        const ranked = [...hb.members].sort(
          (a, b) =>
            (scoreOf(a.config) ?? Number.POSITIVE_INFINITY) - (scoreOf(b.config) ?? Number.POSITIVE_INFINITY),
        );
        state.hyperband = {
          bracket: hb.bracket,
          rung: hb.rung + 1,
          members: ranked.slice(0, nextRung.configs),
        };
        continue;
      }
      const nextBracket = brackets[hb.bracket + 1];
      if (!nextBracket) return null;
      const members = [];
      for (let i = 0; i < nextBracket[0]!.configs; i++) {
        members.push({ config: (state.nextConfig ?? 0) + i, params: randomPoint(space, random) });
      }
      state.nextConfig = (state.nextConfig ?? 0) + nextBracket[0]!.configs;
      state.hyperband = { bracket: hb.bracket + 1, rung: 0, members };
    }
  }

  /**
   * early_stopping {metric, patience, min_delta}: a running trial whose metric (lower is better for
   * minimize) has not improved on its best by more than min_delta for `patience` reports is stopped (no
   * checkpoint); it counts as an early-stopped, finished trial with its last value.
   */
  private async earlyStop(
    tune: TuningJob,
    settings: TuneSettings,
    state: SamplerState,
    active: TrainingJob[],
  ) {
    const rule = settings.earlyStopping!;
    const running = active.filter((j) => j.status === 'running');
    if (running.length === 0) return;
    const metrics = await this.db.prisma.trainingMetric.findMany({
      where: { jobId: { in: running.map((j) => j.id) } },
      orderBy: { id: 'asc' },
    });
    const sign = tune.objective === 'maximize' ? -1 : 1;
    for (const job of running) {
      const series = metrics
        .filter((m) => m.jobId === job.id)
        .map((m) => (m.values as Record<string, number>)[rule.metric])
        .filter((v): v is number => typeof v === 'number');
      if (
        shouldStopEarly(
          series.map((v) => sign * v),
          rule.patience,
          rule.minDelta,
        )
      ) {
        state.earlyStopped = [...new Set([...(state.earlyStopped ?? []), job.trialNumber ?? -1])];
        await this.saveState(tune.id, state);
        await this.d.training
          .stopJob(job, false, `early stopping: ${rule.metric} did not improve for ${rule.patience} reports`)
          .catch((error: unknown) => {
            // The next step finds the trial still running without improvement and tries again.
            this.d
              .logger()
              .error(
                { err: error, tuneId: tune.id, trialId: job.id },
                'stopping an early-stopped trial failed',
              );
          });
      }
    }
  }
}

/** True when the last `patience` values (lower is better) did not beat the best before them by more than minDelta. */
export function shouldStopEarly(values: readonly number[], patience: number, minDelta: number): boolean {
  if (patience < 1 || values.length <= patience) return false;
  const before = values.slice(0, values.length - patience);
  const best = Math.min(...before);
  const recent = values.slice(values.length - patience);
  return recent.every((v) => v > best - minDelta);
}

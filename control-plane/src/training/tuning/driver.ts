import type { Clock } from '../../auth/clock.ts';
import type { Prisma, TrainingJob, TuningJob } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import type { Logger } from '../../logger.ts';
import { withParameters } from '../config.ts';
import type { TrainingService } from '../service.ts';
import { loadJobUsage, type ParameterValue } from '../summary.ts';
import {
  ACTIVE,
  inputOfJob,
  lastValues,
  type SamplerState,
  type TrialMeta,
  type TuneSettings,
} from './records.ts';
import {
  gridPoint,
  hyperbandBrackets,
  randomPoint,
  rng,
  sequentialPoint,
  type TrialPoint,
} from './samplers.ts';
import { type Algorithm, applyConditions, parseSearchSpace, type SearchSpace } from './search-space.ts';

/** How long a just-finished trial without a value may still be waiting for its last reports. */
const SETTLE_MS = 15_000;

/**
 * Runs the searches the API started (service.ts): every trial is a real training job (tune_id set) with
 * the sampled parameters. advanceAll runs after every training supervisor pass: it stops trials that
 * stopped improving (early_stopping) or overrun the budget, launches new ones up to max_concurrent and
 * max_trials, and finishes the search.
 */
export class TuningDriver {
  #advancing = false;
  readonly #steps = new Map<string, Promise<void>>();

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      training: TrainingService;
      logger: Logger;
    },
  ) {}

  private get db() {
    return this.d.db;
  }

  /**
   * Stops the tuning job's running trials (all, or those numbered in onlyNumbers). A trial whose stop fails
   * is logged and left for the next step, which stops it again: both callers (a stop request, the budget)
   * ask at every step for as long as their reason holds (early stopping, too, finds its trial again).
   */
  private async stopTrials(tuneId: string, reason: string, onlyNumbers?: Set<number>): Promise<void> {
    const active = await this.db.prisma.trainingJob.findMany({ where: { tuneId, status: { in: ACTIVE } } });
    for (const job of active) {
      if (onlyNumbers && !onlyNumbers.has(job.trialNumber ?? -1)) continue;
      if (job.status === 'stopping') continue;
      await this.d.training.stopJob(job, false, reason).catch((error: unknown) => {
        // Not thrown: the other trials are still stopped; this one runs (and bills) until a later step.
        this.d.logger.error(
          { err: error, tuneId, trialId: job.id, reason },
          'stopping a trial failed; retried at the next step',
        );
      });
    }
  }

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
          this.d.logger.error({ tuneId: id, err: (error as Error).message }, 'tuning job could not advance'),
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
    // A stop request without complete_running_trials: its trials are stopped at every step, so one whose
    // stop failed is stopped at the next (those already stopping are left alone).
    // First, so that the trials read below are the ones left running.
    const stopRequest = tune.stopRequest as { completeRunningTrials?: boolean } | null;
    if (tune.status === 'stopping' && stopRequest?.completeRunningTrials === false) {
      await this.stopTrials(tuneId, 'tuning job stopped');
    }
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
    this.d.logger.info({ tuneId: tune.id, status, reason }, 'tuning job finished');
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
            this.d.logger.error(
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

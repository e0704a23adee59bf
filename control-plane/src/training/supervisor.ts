import type { WorkloadStatus } from '@anvil/shared/protocol';
import type { Clock } from '../auth/clock.ts';
import type { TrainingJob, Workload } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { PassLoop } from '../util/pass-loop.ts';
import { closeJobSession } from './billing.ts';
import { STOP_GRACE_SECONDS } from './contract.ts';
import type { Launcher, PlacedWorker } from './launcher.ts';
import { type Preemption, preemptedBy } from './preemption.ts';
import type { ReportReader } from './reports.ts';
import type { TrainingService } from './service.ts';

/** What one worker's container is doing, as far as the control plane knows. */
export type WorkerState =
  | { kind: 'starting' }
  | { kind: 'running' }
  | { kind: 'exited'; exitCode: number | null }
  | { kind: 'failed'; error: string }
  | { kind: 'gone' }
  | { kind: 'unreachable' };

function startedAtOf(rows: Map<string, Workload>, workers: PlacedWorker[]): Date | null {
  const rank0 = workers.find((w) => w.rank === 0);
  const started = (rows.get(rank0?.workloadId ?? '')?.actualStatus as Partial<WorkloadStatus> | null)
    ?.startedAt;
  const at = started ? new Date(started) : null;
  return at && !Number.isNaN(at.getTime()) ? at : null;
}

/**
 * The longest a preempted job waits, after its rank 0 exited, for its agent to say that container's logs
 * are all in (the checkpoint written on SIGTERM): an agent that restarted or predates the mark never says.
 */
export const FINAL_REPORTS_WAIT_MS = 30_000;

function finishedAtOf(rows: Map<string, Workload>, workers: PlacedWorker[]): Date | null {
  const rank0 = workers.find((w) => w.rank === 0);
  const finished = (rows.get(rank0?.workloadId ?? '')?.actualStatus as Partial<WorkloadStatus> | null)
    ?.finishedAt;
  const at = finished ? new Date(finished) : null;
  return at && !Number.isNaN(at.getTime()) ? at : null;
}

/** A job's verdict from its workers' states (pure: the state machine's transitions from the agents' reports). */
export type Verdict =
  | { kind: 'wait' }
  | { kind: 'running' }
  | { kind: 'completed' }
  | { kind: 'failed'; reason: string; exitCode: number | null }
  | { kind: 'stopped'; reason: string };

export function workerState(row: Workload | undefined, worker: PlacedWorker): WorkerState {
  if (!row) return { kind: 'gone' };
  if (row.hostUnreachable) return { kind: 'unreachable' };
  const actual = row.actualStatus as Partial<WorkloadStatus> | null;
  // A previous attempt's container (late reports about it) says nothing about this attempt.
  if (worker.staleContainerId && actual?.containerId === worker.staleContainerId) return { kind: 'starting' };
  switch (row.phase) {
    case 'running':
      return { kind: 'running' };
    case 'exited':
      return { kind: 'exited', exitCode: actual?.exitCode ?? null };
    case 'failed':
      return { kind: 'failed', error: actual?.error ?? 'unknown error' };
    case 'stopped':
    case 'removed':
      return row.desired === 'running' ? { kind: 'starting' } : { kind: 'gone' };
    default:
      return { kind: 'starting' };
  }
}

/**
 * pending/running: a worker that could not start, a host that became unreachable or a non-zero exit fail
 * the job; rank 0 exiting 0 completes it; every worker running makes a pending job running.
 * stopping: stopped once no worker runs any more, or once the grace period has passed.
 */
export function verdict(
  status: string,
  states: readonly { rank: number; state: WorkerState }[],
  stopDeadlinePassed: boolean,
): Verdict {
  if (status === 'stopping') {
    const settled = states.every((s) => s.state.kind !== 'running' && s.state.kind !== 'starting');
    if (settled) return { kind: 'stopped', reason: 'stopped on request' };
    if (stopDeadlinePassed)
      return { kind: 'stopped', reason: 'stopped on request (workers killed after the grace period)' };
    return { kind: 'wait' };
  }
  for (const { rank, state } of states) {
    if (state.kind === 'unreachable')
      return { kind: 'failed', reason: `worker ${rank}: its host is unreachable`, exitCode: null };
    if (state.kind === 'failed')
      return { kind: 'failed', reason: `worker ${rank} could not start: ${state.error}`, exitCode: null };
    if (state.kind === 'gone')
      return { kind: 'failed', reason: `worker ${rank}: its container is gone`, exitCode: null };
    if (state.kind === 'exited' && state.exitCode !== 0) {
      return {
        kind: 'failed',
        reason: `worker ${rank} exited with code ${state.exitCode ?? 'unknown'}`,
        exitCode: state.exitCode,
      };
    }
  }
  const rank0 = states.find((s) => s.rank === 0)?.state;
  if (rank0?.kind === 'exited' && rank0.exitCode === 0) return { kind: 'completed' };
  if (status === 'pending' && states.every((s) => s.state.kind === 'running' || s.state.kind === 'exited')) {
    return { kind: 'running' };
  }
  return { kind: 'wait' };
}

export interface TrainingSupervisorOptions {
  busyIntervalMs?: number;
  idleIntervalMs?: number;
  /** How long after a job ended its rank 0's late log lines are still read. */
  tailMs?: number;
}

/**
 * Moves training jobs along from what the database says (so a restarted control plane, or another
 * replica, carries everything on): queued jobs placed (gang), pending → running when every worker runs
 * (billing starts then), exits → completed or failed, stopping → stopped, reports read from the logs,
 * and workers of finished jobs released (no container outlives its job). Hooks run after each pass
 * (the tuner).
 */
export class TrainingSupervisor {
  readonly #loop: PassLoop<boolean>;
  readonly #hooks: (() => Promise<boolean | undefined>)[] = [];
  /** The last pass found nothing open, nothing to release, no tail to read and no hook with work. */
  #quiet = false;
  readonly #busyMs: number;
  readonly #idleMs: number;
  readonly #tailMs: number;

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      service: TrainingService;
      launcher: Launcher;
      reports: ReportReader;
      preemption: Preemption;
      logger: Logger;
    },
    options: TrainingSupervisorOptions = {},
  ) {
    this.#busyMs = options.busyIntervalMs ?? 250;
    this.#idleMs = options.idleIntervalMs ?? 2_000;
    this.#tailMs = options.tailMs ?? 120_000;
    this.#loop = new PassLoop({
      run: () => this.pass(),
      // Quiet (no open job, nothing to release, no recent tail, no open tuning job): nothing is due until a
      // kick (a job or tuning job created or changed, a worker container's state) or the safety sweep.
      after: (busy) => (busy ? this.#busyMs : this.#quiet ? safetySweepMs(this.d.db) : this.#idleMs),
      failedMs: this.#idleMs,
      onError: (error) => this.d.logger.error({ err: error }, 'training supervisor pass failed'),
    });
  }

  /** Runs after every pass (tuning jobs react to their trials); true: it has open work to come back to. */
  afterPass(hook: () => Promise<boolean | undefined>): void {
    this.#hooks.push(hook);
  }

  start(): void {
    this.#loop.start();
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** The pass loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.#loop.passes, wakeAt: this.#loop.wakeAt };
  }

  kick(): void {
    this.#loop.kick();
  }

  /** One pass; true while some job is in a transition. */
  async pass(): Promise<boolean> {
    const now = this.d.clock.now();
    const jobs = await this.d.db.prisma.trainingJob.findMany({
      where: { status: { in: ['queued', 'pending', 'running', 'stopping'] } },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      take: 500,
    });
    const priority = { high: 0, normal: 1, low: 2 } as Record<string, number>;
    const queued = jobs
      .filter((j) => j.status === 'queued')
      .sort((a, b) => (priority[a.priority] ?? 1) - (priority[b.priority] ?? 1));
    for (const job of jobs) {
      if (job.status === 'queued') continue;
      await this.d.reports
        .drain(job.id)
        .catch((error: unknown) =>
          this.d.logger.warn(
            { jobId: job.id, err: (error as Error).message },
            'trainer reports could not be read',
          ),
        );
      await this.advance(job, now);
    }
    for (const job of queued) {
      const outcome = await this.d.service.place(job.id);
      // No room: lower-priority training work may give its GPUs (preemption.ts).
      if (outcome.kind === 'busy') await this.d.preemption.consider(job);
    }
    const released = await this.releaseFinished();
    const tails = await this.readTails(now);
    let hooksOpen = false;
    for (const hook of this.#hooks) if ((await hook()) === true) hooksOpen = true;
    this.#quiet = jobs.length === 0 && released === 0 && tails === 0 && !hooksOpen;
    return jobs.length > 0;
  }

  private async advance(job: TrainingJob, now: Date): Promise<void> {
    const workers = (job.placement ?? []) as unknown as PlacedWorker[];
    const rows = await this.d.db.prisma.workload.findMany({
      where: { id: { in: workers.map((w) => w.workloadId) } },
    });
    const byId = new Map(rows.map((r) => [r.id, r]));
    const states = workers.map((w) => ({ rank: w.rank, state: workerState(byId.get(w.workloadId), w) }));
    const stop = job.stopRequest as { at?: string } | null;
    const deadline = stop?.at
      ? new Date(stop.at).getTime() + (STOP_GRACE_SECONDS + 15) * 1000
      : Number.POSITIVE_INFINITY;
    const result = verdict(job.status, states, now.getTime() >= deadline);
    switch (result.kind) {
      case 'wait':
        return;
      case 'running': {
        const changed = await this.d.db.prisma.trainingJob.updateMany({
          where: { id: job.id, status: 'pending', attempt: job.attempt },
          data: {
            status: 'running',
            statusReason: null,
            sessionStartedAt: now,
            startedAt: job.startedAt ?? now,
            updatedAt: now,
          },
        });
        if (changed.count > 0)
          this.d.logger.info({ jobId: job.id }, 'training job running: billing session opened');
        return;
      }
      case 'completed':
        return this.finish(
          job,
          'completed',
          'exited with code 0',
          0,
          workers,
          now,
          startedAtOf(byId, workers),
        );
      case 'failed':
        return this.finish(
          job,
          'failed',
          result.reason,
          result.exitCode,
          workers,
          now,
          startedAtOf(byId, workers),
        );
      case 'stopped':
        if (preemptedBy(job)) {
          // It resumes from the checkpoint it wrote on SIGTERM only if that report is read first.
          if (!(await this.finalReportsIn(job, workers, byId, states, now))) return;
          return this.requeue(job, workers, now);
        }
        return this.finish(job, 'stopped', result.reason, null, workers, now, startedAtOf(byId, workers));
    }
  }

  /**
   * Whether rank 0's last reports are read: its container exited and its agent said that container's
   * logs are all stored (then read now: they may have landed after this pass's drain), or it ended in a
   * way that leaves nothing more to come (never started, gone, host unreachable). Without the agent's
   * word, FINAL_REPORTS_WAIT_MS after the exit the job goes on with what was read, and says so.
   */
  private async finalReportsIn(
    job: TrainingJob,
    workers: PlacedWorker[],
    rows: Map<string, Workload>,
    states: readonly { rank: number; state: WorkerState }[],
    now: Date,
  ): Promise<boolean> {
    if (states.find((s) => s.rank === 0)?.state.kind !== 'exited') return true;
    const row = rows.get(workers.find((w) => w.rank === 0)?.workloadId ?? '');
    const containerId = (row?.actualStatus as Partial<WorkloadStatus> | null)?.containerId ?? null;
    const complete = containerId !== null && row?.logsCompleteContainerId === containerId;
    if (!complete) {
      const exited = finishedAtOf(rows, workers) ?? new Date((job.stopRequest as { at: string }).at);
      const waited = now.getTime() - exited.getTime();
      if (waited < FINAL_REPORTS_WAIT_MS) return false;
      this.d.logger.warn(
        { jobId: job.id, containerId, waitedMs: waited },
        "rank 0's agent did not confirm its final log lines: requeued with the reports read so far",
      );
    }
    await this.d.reports.drain(job.id);
    return true;
  }

  /** The job's final state and its billing session closed in one transaction, then its workers released. */
  private async finish(
    job: TrainingJob,
    status: 'completed' | 'failed' | 'stopped',
    reason: string,
    exitCode: number | null,
    workers: PlacedWorker[],
    now: Date,
    containerStart: Date | null,
  ): Promise<void> {
    // A job that went from pending straight to its end ran without being seen running: billed from the
    // moment Docker started its rank 0 (kept between its placement and now).
    const ranFrom =
      containerStart && containerStart > job.updatedAt && containerStart < now ? containerStart : now;
    const ended = await this.d.db.prisma.$transaction(async (tx) => {
      const changed = await tx.trainingJob.updateMany({
        where: { id: job.id, status: job.status, attempt: job.attempt },
        data: {
          status,
          statusReason: reason,
          exitCode,
          completedAt: now,
          updatedAt: now,
          ...(job.status === 'pending'
            ? { sessionStartedAt: ranFrom, startedAt: job.startedAt ?? ranFrom }
            : {}),
        },
      });
      if (changed.count === 0) return false;
      await closeJobSession(tx, job, now, status);
      return true;
    });
    if (!ended) return;
    this.d.logger.info({ jobId: job.id, status, reason }, 'training job ended');
    await this.d.launcher.release(workers);
  }

  /**
   * A preempted job whose workers are gone: its billing session closed and the job queued again to resume
   * from its latest checkpoint (the one written on SIGTERM, read by this pass's drain), in one transaction;
   * then its workers released. It is placed again when GPUs free, rank 0 back on its checkpoints' host.
   */
  private async requeue(job: TrainingJob, workers: PlacedWorker[], now: Date): Promise<void> {
    const checkpoint = await this.d.db.prisma.trainingCheckpoint.findFirst({
      where: { jobId: job.id },
      orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    });
    const queued = await this.d.db.prisma.$transaction(async (tx) => {
      const changed = await tx.trainingJob.updateMany({
        where: { id: job.id, status: 'stopping', attempt: job.attempt },
        data: {
          status: 'queued',
          statusReason: `${(job.stopRequest as { reason?: string }).reason ?? 'preempted'}; waiting for GPUs to ${
            checkpoint ? `resume from checkpoint ${checkpoint.id}` : 'restart (no checkpoint was written)'
          }`,
          attempt: job.attempt + 1,
          resumeFrom: checkpoint?.id ?? null,
          placement: [],
          exitCode: null,
          queuedAt: now,
          updatedAt: now,
        },
      });
      if (changed.count === 0) return false;
      await closeJobSession(tx, job, now, 'preempted');
      return true;
    });
    if (!queued) return;
    this.d.logger.info(
      { jobId: job.id, checkpoint: checkpoint?.id ?? null },
      'preempted training job queued again',
    );
    await this.d.launcher.release(workers);
  }

  /** Workers of jobs that ended but still want to run (a crash between the end and the release): released now. */
  /** Returns how many finished jobs still had workers. */
  private async releaseFinished(): Promise<number> {
    const rows = await this.d.db.prisma.$queryRawUnsafe<{ id: string; placement: unknown }[]>(
      `SELECT j.id, j.placement FROM training_jobs j
        WHERE j.status IN ('completed', 'failed', 'stopped', 'cancelled')
          AND EXISTS (SELECT 1 FROM workloads w WHERE w.kind = 'training' AND w.desired = 'running'
                        AND w.spec->'labels'->>'anvil.training-job' = j.id)`,
    );
    for (const row of rows) {
      const placement = (
        typeof row.placement === 'string' ? JSON.parse(row.placement) : row.placement
      ) as PlacedWorker[];
      const running = await this.d.db.prisma.workload.findMany({
        where: {
          kind: 'training',
          desired: 'running',
          spec: { path: ['labels', 'anvil.training-job'], equals: row.id },
        },
        select: { id: true, hostId: true },
      });
      const workers = running.map((w) => ({
        rank: placement.find((p) => p.workloadId === w.id)?.rank ?? (w.id.endsWith('-r0') ? 0 : 1),
        workloadId: w.id,
        hostId: w.hostId,
        gpus: [],
        staleContainerId: null,
      }));
      this.d.logger.warn({ jobId: row.id }, 'releasing the workers of a finished training job');
      await this.d.launcher.release(workers);
    }
    return rows.length;
  }

  /** Late log lines of jobs that ended recently (the agent may send a trainer's last lines after its exit). */
  /** Returns how many jobs ended recently enough for their tails to be read. */
  private async readTails(now: Date): Promise<number> {
    const recent = await this.d.db.prisma.trainingJob.findMany({
      where: {
        status: { in: ['completed', 'failed', 'stopped'] },
        completedAt: { gte: new Date(now.getTime() - this.#tailMs) },
      },
      select: { id: true },
    });
    for (const { id } of recent) await this.d.reports.drain(id).catch(() => 0);
    return recent.length;
  }
}

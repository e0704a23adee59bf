import { ApiError, newId } from '@anvil/shared';
import type { AccessControl, Actor } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import type { Experiment, ExperimentRun, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import type { ParameterValue } from '../training/summary.ts';
import { listOrderBy } from '../util/list-order.ts';
import { type Baseline, experimentInsights, experimentStatistics } from './analysis.ts';
import { compareRuns } from './compare.ts';
import { EXPORT_SECTIONS, type ExportSection, runsCsv } from './csv.ts';
import { type Direction, directionOf } from './metrics.ts';
import { loadRunStates, type RunState, runStatus, type SummaryLoader } from './runs.ts';
import { viewExperiment, viewExperimentSummary, viewRun } from './view.ts';

/** Runs one experiment may hold: every read of the experiment reads each run's job and metric history. */
export const MAX_RUNS_PER_EXPERIMENT = 500;
/** Metrics one comparison may name. */
export const MAX_COMPARE_METRICS = 20;

export interface CreateExperimentInput {
  name: string;
  description: string;
  hypothesis?: string | undefined;
  tags?: string[] | undefined;
  metadata?: Record<string, unknown> | undefined;
  baseline?: Baseline | undefined;
  primaryMetric?: string | undefined;
}

export interface UpdateExperimentInput {
  name?: string | undefined;
  description?: string | undefined;
  status?: 'active' | 'completed' | undefined;
  conclusion?: string | null | undefined;
  tags?: string[] | undefined;
  metadata?: Record<string, unknown> | undefined;
  primaryMetric?: string | undefined;
}

export interface ListExperimentsQuery {
  status?: string | undefined;
  tags?: string | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
  sort?: 'created_at' | 'updated_at' | 'name' | undefined;
  order?: 'asc' | 'desc' | undefined;
}

export interface AddRunInput {
  trainingJobId: string;
  name?: string | undefined;
  parameters?: Record<string, ParameterValue> | undefined;
  tags?: string[] | undefined;
  notes?: string | undefined;
}

export interface ArchiveInput {
  reason?: string | undefined;
  preserve_artifacts?: boolean | undefined;
}

export interface CloneInput {
  name?: string | undefined;
  description?: string | undefined;
  modifications?:
    | {
        hypothesis?: string | null | undefined;
        tags?: string[] | undefined;
        metadata?: Record<string, unknown> | undefined;
        baseline?: Baseline | null | undefined;
        primaryMetric?: string | undefined;
      }
    | undefined;
  copy_runs?: boolean | undefined;
}

export interface ExportInput {
  format?: 'csv' | undefined;
  include?: ExportSection[] | undefined;
  destination?: { type: string; bucket?: string | undefined; path?: string | undefined } | undefined;
}

export interface CompareInput {
  runs?: string[] | undefined;
  metrics?: string[] | undefined;
  analysis?:
    | {
        statistical_tests?: boolean | undefined;
        correlation_analysis?: boolean | undefined;
        performance_pareto?: boolean | undefined;
      }
    | undefined;
  directions?: Record<string, Direction> | undefined;
}

export interface ExperimentServiceOptions {
  db: Database;
  clock: Clock;
  access: AccessControl;
  loadSummaries: SummaryLoader;
  logger: Logger;
}

const json = (value: unknown) => value as Prisma.InputJsonValue;

export function experimentNotFound(experimentId: string): ApiError {
  return new ApiError('EXPERIMENT_NOT_FOUND', `experiment ${experimentId} not found`, { experimentId });
}

function invalid(field: string, reason: string, extra: Record<string, unknown> = {}): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason, ...extra });
}

function archived(row: Experiment, action: string): ApiError {
  return new ApiError('EXPERIMENT_ARCHIVED', `experiment ${row.id} is archived: ${action}`, {
    experimentId: row.id,
    status: row.status,
    archivedAt: row.archivedAt?.toISOString() ?? null,
    suggestion: 'clone the experiment to continue its work',
  });
}

function nonBlank(field: string, value: string): string {
  const trimmed = value.trim();
  if (trimmed === '') throw invalid(field, 'must not be blank');
  return trimmed;
}

const isUniqueViolation = (error: unknown) => {
  const code = (error as { code?: string } | null)?.code;
  const message = String((error as Error | null)?.message ?? '');
  return code === 'P2002' || code === '23505' || message.includes('experiment_runs_linked_job_key');
};

/**
 * Experiments of an account and their runs. Runs link training jobs; everything a run shows about its
 * job (status, metrics, cost, time) is read from the job at each request. Another account's experiment
 * answers 404 EXPERIMENT_NOT_FOUND; members need the role's read (reads, compare, export) or write
 * (changes) on the clusters scope, where training lives.
 */
export class ExperimentService {
  constructor(private readonly options: ExperimentServiceOptions) {}

  private get db() {
    return this.options.db;
  }

  private now() {
    return this.options.clock.now();
  }

  private async require(actor: Actor, permission: 'read' | 'write') {
    return this.options.access.require(actor, { permission, scope: 'clusters' });
  }

  async find(accountId: string, experimentId: string): Promise<Experiment> {
    const row = await this.db.prisma.experiment.findFirst({ where: { id: experimentId, accountId } });
    if (!row) throw experimentNotFound(experimentId);
    return row;
  }

  private async runRows(experimentId: string): Promise<ExperimentRun[]> {
    return this.db.prisma.experimentRun.findMany({
      where: { experimentId },
      orderBy: { position: 'asc' },
    });
  }

  private async states(row: Experiment, runs?: ExperimentRun[]): Promise<RunState[]> {
    const rows = runs ?? (await this.runRows(row.id));
    return loadRunStates(this.db, this.options.loadSummaries, row.accountId, rows, this.now());
  }

  /** The experiment with its runs, statistics and insights, read now. */
  private async view(row: Experiment) {
    const states = await this.states(row);
    const now = this.now();
    const runs = states.map((s) => viewRun(s, now, row.preserveArtifacts));
    const statistics = experimentStatistics(states, row.primaryMetric, now);
    const insights = experimentInsights(states, row.primaryMetric, row.baseline as Baseline | null);
    return viewExperiment(row, runs, statistics, insights);
  }

  async create(actor: Actor, input: CreateExperimentInput) {
    const member = await this.require(actor, 'write');
    const now = this.now();
    const row = await this.db.prisma.experiment.create({
      data: {
        id: newId('exp'),
        accountId: member.accountId,
        createdById: member.userId,
        name: nonBlank('name', input.name),
        description: input.description,
        hypothesis: input.hypothesis ?? null,
        tags: input.tags ?? [],
        metadata: json(input.metadata ?? {}),
        baseline: input.baseline ? json(input.baseline) : undefined,
        primaryMetric: input.primaryMetric ?? 'loss',
        createdAt: now,
        updatedAt: now,
      },
    });
    this.options.logger.info({ experiment_id: row.id, account_id: row.accountId }, 'experiment created');
    return this.view(row);
  }

  async get(actor: Actor, experimentId: string) {
    await this.require(actor, 'read');
    return this.view(await this.find(actor.principal.accountId, experimentId));
  }

  async list(actor: Actor, query: ListExperimentsQuery) {
    await this.require(actor, 'read');
    const limit = query.limit ?? 50;
    const offset = query.offset ?? 0;
    const direction = query.order ?? 'desc';
    const tags = (query.tags ?? '')
      .split(',')
      .map((t) => t.trim())
      .filter((t) => t !== '');
    const where: Prisma.ExperimentWhereInput = {
      accountId: actor.principal.accountId,
      ...(query.status ? { status: query.status } : {}),
      ...(tags.length > 0 ? { tags: { hasEvery: tags } } : {}),
    };
    const [total, rows] = await Promise.all([
      this.db.prisma.experiment.count({ where }),
      this.db.prisma.experiment.findMany({
        where,
        orderBy: listOrderBy(query.sort, direction),
        take: limit,
        skip: offset,
      }),
    ]);
    const counts =
      rows.length === 0
        ? []
        : await this.db.prisma.experimentRun.groupBy({
            by: ['experimentId'],
            where: { experimentId: { in: rows.map((r) => r.id) } },
            _count: { _all: true },
          });
    const countOf = new Map(counts.map((c) => [c.experimentId, c._count._all]));
    return {
      experiments: rows.map((r) => viewExperimentSummary(r, countOf.get(r.id) ?? 0)),
      pagination: { total, limit, offset, hasMore: offset + rows.length < total },
    };
  }

  async update(actor: Actor, experimentId: string, input: UpdateExperimentInput) {
    await this.require(actor, 'write');
    const row = await this.find(actor.principal.accountId, experimentId);
    const now = this.now();
    const data: Prisma.ExperimentUpdateManyMutationInput = { updatedAt: now };
    if (input.name !== undefined) data.name = nonBlank('name', input.name);
    if (input.description !== undefined) data.description = input.description;
    if (input.conclusion !== undefined) data.conclusion = input.conclusion;
    if (input.tags !== undefined) data.tags = input.tags;
    if (input.metadata !== undefined) data.metadata = json(input.metadata);
    if (input.primaryMetric !== undefined) data.primaryMetric = input.primaryMetric;
    const where: Prisma.ExperimentWhereInput = { id: row.id, accountId: row.accountId };
    if (input.status !== undefined && input.status !== row.status) {
      if (row.status === 'archived') throw archived(row, 'its status cannot change');
      data.status = input.status;
      data.completedAt = input.status === 'completed' ? now : null;
      // An archive landing between the read and this write wins: the update then finds no row to change.
      where.status = { not: 'archived' };
    }
    const changed = await this.db.prisma.experiment.updateMany({ where, data });
    if (changed.count === 0) {
      const current = await this.find(row.accountId, experimentId);
      throw archived(current, 'its status cannot change');
    }
    return this.view(await this.find(row.accountId, experimentId));
  }

  async addRun(actor: Actor, experimentId: string, input: AddRunInput) {
    const member = await this.require(actor, 'write');
    const accountId = member.accountId;
    const experiment = await this.find(accountId, experimentId);
    if (experiment.status === 'archived') throw archived(experiment, 'it takes no new runs');
    const now = this.now();
    const [job] = await this.options.loadSummaries(this.db, accountId, [input.trainingJobId], now);
    if (!job) {
      throw new ApiError('TRAINING_JOB_NOT_FOUND', `training job ${input.trainingJobId} not found`, {
        trainingJobId: input.trainingJobId,
      });
    }
    const given = input.parameters ?? {};
    for (const [name, value] of Object.entries(given)) {
      if (name in job.parameters && job.parameters[name] !== value) {
        throw invalid(`parameters.${name}`, `differs from the value the job ran with`, {
          given: value,
          jobValue: job.parameters[name],
        });
      }
    }
    const name = input.name === undefined ? job.name : nonBlank('name', input.name);
    const runId = newId('run');
    try {
      await this.db.prisma.$transaction(async (tx) => {
        // The row lock orders this insert against archive and other inserts into the experiment.
        const [locked] = await tx.$queryRawUnsafe<{ status: string }[]>(
          'SELECT status FROM experiments WHERE id = $1 FOR UPDATE',
          experiment.id,
        );
        if (!locked) throw experimentNotFound(experimentId);
        if (locked.status === 'archived')
          throw archived({ ...experiment, status: 'archived' }, 'it takes no new runs');
        const taken = await tx.experimentRun.aggregate({
          where: { experimentId: experiment.id },
          _count: { _all: true },
          _max: { position: true },
        });
        const count = taken._count._all;
        if (count >= MAX_RUNS_PER_EXPERIMENT) {
          throw new ApiError(
            'LIMIT_EXCEEDED',
            `an experiment holds at most ${MAX_RUNS_PER_EXPERIMENT} runs`,
            {
              limit: MAX_RUNS_PER_EXPERIMENT,
              current: count,
            },
          );
        }
        await tx.experimentRun.create({
          data: {
            id: runId,
            experimentId: experiment.id,
            accountId,
            createdById: member.userId,
            trainingJobId: job.id,
            position: (taken._max.position ?? 0) + 1,
            name,
            parameters: json(given),
            tags: input.tags ?? [],
            notes: input.notes ?? null,
            createdAt: now,
            updatedAt: now,
          },
        });
        await tx.experiment.update({ where: { id: experiment.id }, data: { updatedAt: now } });
      });
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      // The run holding the job: in this experiment (perhaps a clone's copy), else where it is linked.
      const holder =
        (await this.db.prisma.experimentRun.findFirst({
          where: { trainingJobId: job.id, experimentId: experiment.id },
        })) ??
        (await this.db.prisma.experimentRun.findFirst({
          where: { trainingJobId: job.id, accountId, copiedFromRunId: null },
        }));
      if (!holder) throw error;
      throw new ApiError('RUN_ALREADY_EXISTS', `training job ${job.id} is already a run of an experiment`, {
        trainingJobId: job.id,
        existingExperimentId: holder.experimentId,
        existingRunId: holder.id,
      });
    }
    this.options.logger.info(
      { experiment_id: experiment.id, run_id: runId, training_job_id: job.id },
      'experiment run linked',
    );
    const row = await this.db.prisma.experimentRun.findUniqueOrThrow({ where: { id: runId } });
    const [state] = await this.states(experiment, [row]);
    return viewRun(state!, this.now(), experiment.preserveArtifacts);
  }

  async archive(actor: Actor, experimentId: string, input: ArchiveInput) {
    await this.require(actor, 'write');
    const row = await this.find(actor.principal.accountId, experimentId);
    const now = this.now();
    // Archiving twice keeps the first archive (reason, time, artifact choice): a retried call is harmless.
    await this.db.prisma.experiment.updateMany({
      where: { id: row.id, accountId: row.accountId, status: { not: 'archived' } },
      data: {
        status: 'archived',
        archivedAt: now,
        archiveReason: input.reason ?? null,
        preserveArtifacts: input.preserve_artifacts ?? true,
        updatedAt: now,
      },
    });
    const current = await this.find(row.accountId, experimentId);
    const runs = await this.db.prisma.experimentRun.count({ where: { experimentId: current.id } });
    if (row.status !== 'archived') {
      this.options.logger.info({ experiment_id: current.id, runs }, 'experiment archived');
    }
    return {
      id: current.id,
      name: current.name,
      status: 'archived' as const,
      previousStatus: row.status === 'archived' ? null : row.status,
      archivedAt: current.archivedAt!.toISOString(),
      reason: current.archiveReason,
      preserveArtifacts: current.preserveArtifacts,
      runs,
      alreadyArchived: row.status === 'archived',
    };
  }

  async clone(actor: Actor, experimentId: string, input: CloneInput) {
    const member = await this.require(actor, 'write');
    const source = await this.find(member.accountId, experimentId);
    const changes = input.modifications ?? {};
    const now = this.now();
    const name =
      input.name === undefined ? `${source.name} (copy)`.slice(0, 100) : nonBlank('name', input.name);
    const cloneId = newId('exp');
    const metadata = { ...(source.metadata as Record<string, unknown>), ...(changes.metadata ?? {}) };
    const baseline = changes.baseline !== undefined ? changes.baseline : (source.baseline as Baseline | null);
    await this.db.prisma.$transaction(async (tx) => {
      await tx.experiment.create({
        data: {
          id: cloneId,
          accountId: member.accountId,
          createdById: member.userId,
          name,
          description: input.description ?? source.description,
          hypothesis: changes.hypothesis !== undefined ? changes.hypothesis : source.hypothesis,
          tags: changes.tags ?? source.tags,
          metadata: json(metadata),
          baseline: baseline === null ? undefined : json(baseline),
          primaryMetric: changes.primaryMetric ?? source.primaryMetric,
          clonedFromId: source.id,
          createdAt: now,
          updatedAt: now,
        },
      });
      if (!input.copy_runs) return;
      const runs = await tx.experimentRun.findMany({
        where: { experimentId: source.id },
        orderBy: { position: 'asc' },
      });
      if (runs.length === 0) return;
      await tx.experimentRun.createMany({
        data: runs.map((run, index) => ({
          id: newId('run'),
          experimentId: cloneId,
          position: index + 1,
          accountId: member.accountId,
          createdById: member.userId,
          trainingJobId: run.trainingJobId,
          name: run.name,
          parameters: json(run.parameters),
          tags: run.tags,
          notes: run.notes,
          copiedFromRunId: run.id,
          createdAt: now,
          updatedAt: now,
        })),
      });
    });
    this.options.logger.info(
      { experiment_id: cloneId, cloned_from: source.id, copy_runs: input.copy_runs === true },
      'experiment cloned',
    );
    return this.view(await this.find(member.accountId, cloneId));
  }

  async export(actor: Actor, experimentId: string, input: ExportInput) {
    await this.require(actor, 'read');
    const row = await this.find(actor.principal.accountId, experimentId);
    const destination = input.destination?.type ?? 'download';
    if (destination !== 'download') {
      throw new ApiError(
        'DESTINATION_NOT_CONFIGURED',
        `export destination ${destination} is not configured on this installation; use {"type":"download"}`,
        { type: destination, supportedTypes: ['download'] },
      );
    }
    const states = await this.states(row);
    const now = this.now();
    const runs = states.map((s) => viewRun(s, now, row.preserveArtifacts));
    const include = new Set(input.include ?? EXPORT_SECTIONS);
    const csv = runsCsv(
      { id: row.id, name: row.name, metadata: row.metadata as Record<string, unknown> },
      runs,
      include,
    );
    return { filename: `${row.id}.csv`, csv, rows: runs.length };
  }

  async compare(actor: Actor, experimentId: string, input: CompareInput) {
    await this.require(actor, 'read');
    const row = await this.find(actor.principal.accountId, experimentId);
    let rows = await this.runRows(row.id);
    if (input.runs !== undefined) {
      const byId = new Map(rows.map((r) => [r.id, r]));
      const wanted = [...new Set(input.runs)];
      const unknown = wanted.find((id) => !byId.has(id));
      if (unknown !== undefined) {
        throw new ApiError('RUN_NOT_FOUND', `run ${unknown} is not a run of experiment ${row.id}`, {
          runId: unknown,
          experimentId: row.id,
        });
      }
      rows = wanted.map((id) => byId.get(id)!);
    }
    const states = await this.states(row, rows);
    const completed = states.filter((s) => runStatus(s) === 'completed');
    if (completed.length < 2) {
      throw new ApiError('INSUFFICIENT_RUNS', `comparing needs 2 completed runs; ${completed.length} found`, {
        completedRuns: completed.length,
        minimumRequired: 2,
        runs: states.map((s) => ({ id: s.row.id, status: runStatus(s) })),
      });
    }
    const names = input.metrics ?? defaultMetrics(completed, row.primaryMetric);
    const metrics = names.map((name) => ({ name, direction: input.directions?.[name] ?? directionOf(name) }));
    const analysis = input.analysis ?? {};
    const now = this.now();
    const result = compareRuns(states, {
      metrics,
      statisticalTests: analysis.statistical_tests ?? true,
      correlationAnalysis: analysis.correlation_analysis ?? true,
      performancePareto: analysis.performance_pareto ?? true,
    });
    return {
      experimentId: row.id,
      comparedAt: now.toISOString(),
      metrics,
      runs: states.map((s) => viewRun(s, now, row.preserveArtifacts)),
      excludedRuns: states
        .filter((s) => runStatus(s) !== 'completed')
        .map((s) => ({ runId: s.row.id, status: runStatus(s), reason: 'only completed runs are compared' })),
      ...result,
    };
  }
}

/** The primary metric first, then every other metric all completed runs report a final value of (sorted). */
function defaultMetrics(completed: readonly RunState[], primary: string): string[] {
  const shared = Object.keys(completed[0]!.observations.metrics.final ?? {}).filter((name) =>
    completed.every((s) => s.observations.metrics.final?.[name] !== undefined),
  );
  return [primary, ...shared.filter((n) => n !== primary).sort()].slice(0, MAX_COMPARE_METRICS);
}

import { ApiError, newId } from '@anvil/shared';
import {
  type MessageOf,
  WORKLOAD_PHASES,
  WorkloadSpec,
  type WorkloadSpec as WorkloadSpecValue,
  type WorkloadStatus,
} from '@anvil/shared/protocol';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import type { Clock } from '../../auth/clock.ts';
import type { Prisma, Workload } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import { cleanJson, cleanText } from '../agents/sanitize.ts';
import type { FleetEvents } from '../hosts/events.ts';

export const WORKLOAD_KINDS = ['cluster', 'endpoint_worker', 'training'] as const;
export type WorkloadKind = (typeof WORKLOAD_KINDS)[number];

/** running: in the host's desired set. stopped: not running, may run again. deleted: gone for good. */
export const DESIRED_STATES = ['running', 'stopped', 'deleted'] as const;
export type DesiredWorkloadState = (typeof DESIRED_STATES)[number];

/** The agent's phases, plus `stopped` and `removed` once the agent confirmed the container is gone. */
export type WorkloadPhaseValue = (typeof WORKLOAD_PHASES)[number] | 'stopped' | 'removed';
const AGENT_PHASES: ReadonlySet<string> = new Set(WORKLOAD_PHASES);

export type PullProgressRecord = {
  image: string;
  status: string;
  layer: string | null;
  current: number | null;
  total: number | null;
  done: boolean;
  error: string | null;
  at: string;
};

export interface WorkloadView {
  id: string;
  hostId: string;
  kind: WorkloadKind;
  ownerAccountId: string;
  spec: WorkloadSpecValue;
  desired: DesiredWorkloadState;
  phase: WorkloadPhaseValue;
  actualStatus: WorkloadStatus | null;
  actualAt: string | null;
  pullProgress: PullProgressRecord | null;
  hostUnreachable: boolean;
  generation: number;
  createdAt: string;
  updatedAt: string;
}

export type WorkloadSpecInput = Omit<WorkloadSpecValue, 'workloadId'>;

export interface CreateWorkloadInput {
  /** Defaults to wl_<id>; later areas may pass the id of what the workload serves (a cluster's). */
  id?: string;
  hostId: string;
  kind: WorkloadKind;
  ownerAccountId: string;
  spec: WorkloadSpecInput;
  desired?: 'running' | 'stopped';
}

let specChecker: TypeCheck<typeof WorkloadSpec> | null = null;

/** The spec as stored and sent for workload `id`, or 400 VALIDATION_ERROR naming the field that is wrong. */
export function validSpec(id: string, input: WorkloadSpecInput): WorkloadSpecValue {
  specChecker ??= TypeCompiler.Compile(WorkloadSpec);
  // Secret env and files are filled in as the desired set is sent (the spec resolvers), never stored.
  const { secretEnv: _env, files: _files, ...spec } = input;
  const full = { ...spec, workloadId: id };
  if (!specChecker.Check(full)) {
    const error = specChecker.Errors(full).First();
    const field = error?.path.replace(/^\//, '').replaceAll('/', '.') || 'spec';
    throw new ApiError(
      'VALIDATION_ERROR',
      `workload spec field "${field}" ${error?.message ?? 'is invalid'}`,
      {
        field,
        reason: error?.message ?? 'is invalid',
      },
    );
  }
  return full;
}

export function viewWorkload(row: Workload): WorkloadView {
  return {
    id: row.id,
    hostId: row.hostId,
    kind: row.kind as WorkloadKind,
    ownerAccountId: row.ownerAccountId,
    spec: row.spec as unknown as WorkloadSpecValue,
    desired: row.desired as DesiredWorkloadState,
    phase: row.phase as WorkloadPhaseValue,
    actualStatus: row.actualStatus as unknown as WorkloadStatus | null,
    actualAt: row.actualAt?.toISOString() ?? null,
    pullProgress: row.pullProgress as unknown as PullProgressRecord | null,
    hostUnreachable: row.hostUnreachable,
    generation: row.generation,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

type Tx = Prisma.TransactionClient;

/** The workload a spec belongs to, as a spec resolver sees it. */
export interface ResolvableWorkload {
  id: string;
  kind: WorkloadKind;
  ownerAccountId: string;
  hostId: string;
}

/**
 * Completes a stored spec just before it is sent to the agent (contract 5: the secrets area fills
 * `secretEnv` and `files` of cluster workloads). Returns the spec to send.
 */
export type SpecResolver = (
  spec: WorkloadSpecValue,
  workload: ResolvableWorkload,
) => Promise<WorkloadSpecValue>;

/** Told of every container state change an agent reports, after it is stored. */
export type ContainerStateListener = (
  workload: { hostId: string; workloadId: string },
  change: MessageOf<'container_state'>,
) => Promise<void>;

/** Pull progress is written at most this often per workload (the final event always). */
const PULL_PROGRESS_MIN_INTERVAL_MS = 1000;

/**
 * The desired set of every host: which workloads it should run, with a per-host generation that
 * increases with every change (the agent ignores an older set arriving late). The database is the
 * source of truth; FleetEvents tells the gateway to push the new set to the host's agent.
 */
export class WorkloadService {
  readonly #pullWrittenAt = new Map<string, number>();
  readonly #stateListeners = new Set<ContainerStateListener>();

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly events: FleetEvents,
    /** What desiredSet() runs every spec through, in this order (secrets, registry credentials...). */
    private readonly resolvers: readonly SpecResolver[] = [],
  ) {}

  /**
   * Runs `work` in a transaction that first bumps the host's generation: the UPDATE's row lock orders
   * concurrent changes of one host, so generations are handed out in commit order. Then the push.
   */
  private async change<T>(hostId: string, work: (tx: Tx, generation: number) => Promise<T>): Promise<T> {
    const now = this.clock.now();
    const result = await this.db.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRawUnsafe<{ desired_generation: number }[]>(
        `UPDATE hosts SET desired_generation = desired_generation + 1, updated_at = $2
         WHERE id = $1 AND deleted_at IS NULL RETURNING desired_generation`,
        hostId,
        now,
      );
      const row = rows[0];
      if (!row) throw new ApiError('HOST_NOT_FOUND', `no host ${hostId}`, { hostId });
      return work(tx, Number(row.desired_generation));
    });
    await this.events.desiredChanged(hostId);
    return result;
  }

  async create(input: CreateWorkloadInput): Promise<WorkloadView> {
    if (!WORKLOAD_KINDS.includes(input.kind)) {
      throw new ApiError('VALIDATION_ERROR', `kind must be one of ${WORKLOAD_KINDS.join(', ')}`, {
        field: 'kind',
        reason: 'unknown kind',
      });
    }
    const id = input.id ?? newId('wl');
    const spec = validSpec(id, input.spec);
    return this.change(input.hostId, async (tx, generation) =>
      viewWorkload(
        await tx.workload.create({
          data: {
            id,
            hostId: input.hostId,
            kind: input.kind,
            ownerAccountId: input.ownerAccountId,
            spec: spec as unknown as Prisma.InputJsonValue,
            desired: input.desired ?? 'running',
            generation,
            createdAt: this.clock.now(),
          },
        }),
      ),
    );
  }

  private async find(id: string): Promise<Workload> {
    const row = await this.db.prisma.workload.findUnique({ where: { id } });
    if (!row) throw new ApiError('WORKLOAD_NOT_FOUND', `no workload ${id}`, { workloadId: id });
    return row;
  }

  async get(id: string): Promise<WorkloadView> {
    return viewWorkload(await this.find(id));
  }

  async listForHost(hostId: string): Promise<WorkloadView[]> {
    const rows = await this.db.prisma.workload.findMany({
      where: { hostId },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    return rows.map(viewWorkload);
  }

  /** running, stopped or deleted; deleted is final. The host's agent converges on the new set. */
  async setDesired(id: string, desired: DesiredWorkloadState): Promise<WorkloadView> {
    if (!DESIRED_STATES.includes(desired)) {
      throw new ApiError('VALIDATION_ERROR', `desired must be one of ${DESIRED_STATES.join(', ')}`, {
        field: 'desired',
        reason: 'unknown state',
      });
    }
    const row = await this.find(id);
    if (row.desired === desired) return viewWorkload(row);
    if (row.desired === 'deleted') {
      throw new ApiError('CONFLICT', `workload ${id} is deleted`, { workloadId: id, desired: row.desired });
    }
    return this.change(row.hostId, async (tx, generation) =>
      viewWorkload(await tx.workload.update({ where: { id }, data: { desired, generation } })),
    );
  }

  /** A new spec: the agent recreates the container (its spec hash changes). */
  async updateSpec(id: string, spec: WorkloadSpecInput): Promise<WorkloadView> {
    const row = await this.find(id);
    if (row.desired === 'deleted') {
      throw new ApiError('CONFLICT', `workload ${id} is deleted`, { workloadId: id, desired: row.desired });
    }
    const full = validSpec(id, spec);
    return this.change(row.hostId, async (tx, generation) =>
      viewWorkload(
        await tx.workload.update({
          where: { id },
          data: { spec: full as unknown as Prisma.InputJsonValue, generation },
        }),
      ),
    );
  }

  /** Listens to container state changes (the secrets area counts injections); returns the unsubscribe. */
  onContainerState(listener: ContainerStateListener): () => void {
    this.#stateListeners.add(listener);
    return () => this.#stateListeners.delete(listener);
  }

  /**
   * The host's desired set and its generation, read in one statement (one snapshot); null for no such
   * host. The specs are then completed by the spec resolvers (which may read more, e.g. secrets).
   */
  async desiredSet(hostId: string): Promise<{ generation: number; workloads: WorkloadSpecValue[] } | null> {
    const rows = await this.db.sql.query<{
      generation: number;
      spec: WorkloadSpecValue | null;
      kind: WorkloadKind | null;
      owner_account_id: string | null;
    }>(
      `SELECT h.desired_generation AS generation, w.spec, w.kind, w.owner_account_id
       FROM hosts h LEFT JOIN workloads w ON w.host_id = h.id AND w.desired = 'running'
       WHERE h.id = $1 AND h.deleted_at IS NULL
       ORDER BY w.created_at, w.id`,
      [hostId],
    );
    const first = rows[0];
    if (!first) return null;
    const workloads = await Promise.all(
      rows.flatMap((r) => {
        if (!r.spec) return [];
        const spec: WorkloadSpecValue = typeof r.spec === 'string' ? JSON.parse(r.spec) : r.spec;
        const workload: ResolvableWorkload = {
          id: spec.workloadId,
          kind: r.kind as WorkloadKind,
          ownerAccountId: r.owner_account_id ?? '',
          hostId,
        };
        return [this.#resolve(spec, workload)];
      }),
    );
    return { generation: Number(first.generation), workloads };
  }

  async #resolve(spec: WorkloadSpecValue, workload: ResolvableWorkload): Promise<WorkloadSpecValue> {
    let resolved = spec;
    for (const resolver of this.resolvers) resolved = await resolver(resolved, workload);
    return resolved;
  }

  /**
   * Stores an actual_state report: each reported workload's status and phase, then, for the generation
   * the report converges to, marks workloads no longer desired and absent from it as stopped or removed.
   */
  async recordActualState(
    hostId: string,
    generation: number | null,
    statuses: WorkloadStatus[],
  ): Promise<void> {
    const now = this.clock.now().toISOString();
    const reported = statuses.map((s) => ({
      id: s.workloadId,
      phase: AGENT_PHASES.has(s.phase) ? s.phase : 'pending',
      status: cleanJson(s),
    }));
    if (reported.length > 0) {
      await this.db.sql.query(
        `UPDATE workloads AS w SET actual_status = x.status, phase = x.phase, actual_at = $3, updated_at = $3
         FROM jsonb_to_recordset($2::jsonb) AS x(id text, phase text, status jsonb)
         WHERE w.id = x.id AND w.host_id = $1`,
        [hostId, JSON.stringify(reported), now],
      );
    }
    if (generation !== null) {
      await this.db.sql.query(
        `UPDATE workloads SET phase = CASE WHEN desired = 'deleted' THEN 'removed' ELSE 'stopped' END, updated_at = $3
         WHERE host_id = $1 AND desired <> 'running' AND generation <= $2
           AND phase NOT IN ('stopped', 'removed') AND NOT (id = ANY($4::text[]))`,
        [hostId, generation, now, reported.map((r) => r.id)],
      );
    }
  }

  /** One workload changed on the host (started, exited, failed, removed). */
  async recordContainerState(hostId: string, change: MessageOf<'container_state'>): Promise<void> {
    const now = this.clock.now().toISOString();
    const phase = change.phase === 'removed' || AGENT_PHASES.has(change.phase) ? change.phase : null;
    const patch = cleanJson({
      containerId: change.containerId,
      containerState: change.containerState,
      exitCode: change.exitCode,
      error: change.error,
      startedAt: change.startedAt,
      at: change.at,
      ...(phase && phase !== 'removed' ? { phase } : {}),
    });
    await this.db.sql.query(
      `UPDATE workloads SET
         phase = CASE
           WHEN $3::text IS NULL THEN phase
           WHEN $3 = 'removed' THEN CASE desired WHEN 'deleted' THEN 'removed' WHEN 'stopped' THEN 'stopped' ELSE 'pending' END
           ELSE $3 END,
         actual_status = COALESCE(actual_status, '{}'::jsonb) || $4::jsonb, actual_at = $5, updated_at = $5
       WHERE id = $2 AND host_id = $1`,
      [hostId, change.workloadId, phase, JSON.stringify(patch), now],
    );
    await Promise.allSettled(
      [...this.#stateListeners].map((listener) =>
        listener({ hostId, workloadId: change.workloadId }, change),
      ),
    );
  }

  /** Image pull progress, kept on the workload it is for; throttled, the final event always written. */
  async recordPullProgress(hostId: string, progress: MessageOf<'pull_progress'>): Promise<boolean> {
    if (!progress.workloadId) return false;
    const nowMs = this.clock.now().getTime();
    const final = progress.done || progress.error !== null;
    const last = this.#pullWrittenAt.get(progress.workloadId);
    if (!final && last !== undefined && nowMs - last < PULL_PROGRESS_MIN_INTERVAL_MS) return false;
    if (final) this.#pullWrittenAt.delete(progress.workloadId);
    else {
      // Pulls that never finished must not pile up here forever.
      if (this.#pullWrittenAt.size >= 10_000) this.#pullWrittenAt.clear();
      this.#pullWrittenAt.set(progress.workloadId, nowMs);
    }
    const record: PullProgressRecord = {
      image: cleanText(progress.image, 512),
      status: cleanText(progress.status, 1024),
      layer: progress.layer === null ? null : cleanText(progress.layer, 128),
      current: progress.current,
      total: progress.total,
      done: progress.done,
      error: progress.error === null ? null : cleanText(progress.error, 4096),
      at: new Date(nowMs).toISOString(),
    };
    await this.db.sql.query(
      'UPDATE workloads SET pull_progress = $3::jsonb, updated_at = $4 WHERE id = $2 AND host_id = $1',
      [hostId, progress.workloadId, JSON.stringify(record), new Date(nowMs).toISOString()],
    );
    return true;
  }
}

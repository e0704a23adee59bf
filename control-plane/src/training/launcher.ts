import type { WorkloadSpec } from '@anvil/shared/protocol';
import type { Clock } from '../auth/clock.ts';
import { Prisma, type TrainingJob } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { FleetEvents } from '../fleet/hosts/events.ts';
import { workerLimits } from '../fleet/workloads/limits.ts';
import { TX_OPTIONS } from '../scheduler/allocator.ts';
import { lockHost, refreshHost } from '../scheduler/capacity.ts';
import {
  CHECKPOINT_DIR,
  CODE_PATH,
  DATASET_DIR,
  hyperparameterEnvName,
  RENDEZVOUS_PORT,
  RENDEZVOUS_PORTS,
  STOP_GRACE_SECONDS,
} from './contract.ts';
import { couldEverFit, type GangRequest, type HostFree, planGang } from './placement.ts';
import type { RecipeSnapshot } from './recipes.ts';

type Tx = Prisma.TransactionClient;

/** One worker of the current attempt, as stored in training_jobs.placement. */
export interface PlacedWorker {
  rank: number;
  workloadId: string;
  hostId: string;
  gpus: { index: number; uuid: string }[];
  /** The container a previous attempt left on this workload: its late reports are not this attempt's. */
  staleContainerId: string | null;
}

/**
 * Where a gang's workers meet (README: Training, multi-node). One host: rank 0's container name on the
 * account network (Docker's DNS), port RENDEZVOUS_PORT. Several hosts: rank 0's host's rendezvous address
 * and a port of RENDEZVOUS_PORTS free on that host, published there for the gang's peer hosts only.
 */
export interface Rendezvous {
  masterAddr: string;
  masterPort: number;
  /** The hosts' rendezvous addresses when the gang spans several hosts; null on one host. */
  hostAddresses: Map<string, string> | null;
}

export type LaunchOutcome =
  | { kind: 'placed'; workers: PlacedWorker[] }
  | { kind: 'busy' }
  | { kind: 'impossible'; availableGpuTypes: string[] }
  | { kind: 'gone' };

export type WorkerSpecOf = (
  job: TrainingJob,
  worker: Omit<PlacedWorker, 'staleContainerId'>,
  rendezvous: Rendezvous,
) => WorkloadSpec;

const DEADLOCK = '40P01';
const SERIALIZATION = '40001';

/** Rank 0 keeps one workload (and so one volume, the checkpoints) for the job's life; other ranks one per attempt. */
export function workloadIdOf(jobId: string, attempt: number, rank: number): string {
  return rank === 0 ? `${jobId}-r0` : `${jobId}-a${attempt}-r${rank}`;
}

/** The container of one worker (the trainer contract, contract.ts). */
export function workerSpec(
  job: Pick<
    TrainingJob,
    'id' | 'accountId' | 'workers' | 'parameters' | 'image' | 'command' | 'config' | 'datasetId' | 'modelType'
  >,
  worker: { rank: number; workloadId: string; hostId: string; gpus: { index: number; uuid: string }[] },
  attempt: number,
  resumePath: string | null,
  datasetFormat: string | null,
  rendezvous: Rendezvous,
): WorkloadSpec {
  const parameters = (job.parameters ?? {}) as Record<string, unknown>;
  const perWorker = worker.gpus.length;
  const env: Record<string, string> = {
    // What torchrun and torch.distributed read: one container is one node; a launcher that starts one
    // process per GPU sets each process's RANK and LOCAL_RANK itself from NODE_RANK and LOCAL_WORLD_SIZE.
    MASTER_ADDR: rendezvous.masterAddr,
    MASTER_PORT: String(rendezvous.masterPort),
    WORLD_SIZE: String(job.workers * Math.max(1, perWorker)),
    RANK: String(worker.rank * Math.max(1, perWorker)),
    NODE_RANK: String(worker.rank),
    LOCAL_RANK: '0',
    LOCAL_WORLD_SIZE: String(Math.max(1, perWorker)),
    ANVIL_MASTER_ADDR: rendezvous.masterAddr,
    ANVIL_MASTER_PORT: String(rendezvous.masterPort),
    ANVIL_JOB_ID: job.id,
    ANVIL_ATTEMPT: String(attempt),
    ANVIL_RANK: String(worker.rank),
    ANVIL_WORLD_SIZE: String(job.workers),
    ANVIL_LOCAL_GPUS: String(worker.gpus.length),
    ANVIL_HPARAMS: JSON.stringify(parameters),
    ANVIL_CHECKPOINT_DIR: CHECKPOINT_DIR,
    ANVIL_RESUME_FROM: resumePath ?? '',
    ANVIL_DATASET_DIR: DATASET_DIR,
    ANVIL_DATASET_FILE: datasetFormat ? `${DATASET_DIR}/data.${datasetFormat}` : '',
  };
  // Managed training (recipes.ts): what the recipe's entrypoint reads; set whenever the job names them.
  const config = (job.config ?? {}) as Record<string, unknown>;
  const named = (value: unknown) => (typeof value === 'string' ? value : '');
  const recipe = config['recipe'] as RecipeSnapshot | undefined;
  env['ANVIL_MODEL_TYPE'] = job.modelType;
  env['ANVIL_BASE_MODEL'] =
    named(config['baseModel']) ||
    named((config['modelConfig'] as Record<string, unknown> | undefined)?.['baseModel']);
  env['ANVIL_ARCHITECTURE'] = named(config['architecture']);
  env['ANVIL_STRATEGY'] = named(config['strategy']);
  env['ANVIL_RECIPE'] = recipe?.name ?? '';
  env['ANVIL_WEIGHTS_PATH'] = recipe?.weightsPath ?? '';
  for (const [name, value] of Object.entries(parameters)) {
    if (value === null || typeof value === 'object') continue;
    env[hyperparameterEnvName(name)] = String(value);
  }
  if (typeof parameters['epochs'] === 'number') env['ANVIL_TOTAL_EPOCHS'] = String(parameters['epochs']);
  const customCode = (
    (job.config as Record<string, unknown>)['modelConfig'] as { customCode?: unknown } | undefined
  )?.customCode;
  const command =
    job.command.length > 0 ? job.command : typeof customCode === 'string' ? ['python', CODE_PATH] : null;
  const addresses = rendezvous.hostAddresses;
  const ownAddress = addresses?.get(worker.hostId) ?? null;
  return {
    workloadId: worker.workloadId,
    image: job.image,
    command,
    entrypoint: null,
    env,
    labels: {
      'anvil.training-job': job.id,
      'anvil.account': job.accountId,
      'anvil.rank': String(worker.rank),
      'anvil.attempt': String(attempt),
    },
    gpus: worker.gpus,
    accountId: job.accountId,
    ...workerLimits(worker.gpus.length),
    shmBytes: null,
    ports: [],
    // Rank 0's volume is the checkpoint directory, kept on its host between attempts.
    volume: worker.rank === 0 ? { containerPath: CHECKPOINT_DIR } : null,
    // A trainer that exits is done (its exit code says how); it is never restarted behind the job's back.
    restartPolicy: { name: 'no', maxRetries: 0 },
    stopGraceSeconds: STOP_GRACE_SECONDS,
    // Several hosts: rank 0 publishes the port for its peer hosts; every worker may dial it.
    rendezvous: addresses
      ? {
          publish: worker.rank === 0 ? [rendezvous.masterPort] : [],
          peers:
            worker.rank === 0
              ? [...new Set([...addresses.values()])].filter((a) => a !== ownAddress).sort()
              : [],
          dial: [{ address: rendezvous.masterAddr, port: rendezvous.masterPort }],
        }
      : null,
  };
}

/** A gang on several hosts needs every host's rendezvous address (ANVIL_RENDEZVOUS_ADDRESS). */
function spansHosts(plan: readonly { hostId: string }[]): boolean {
  return new Set(plan.map((p) => p.hostId)).size > 1;
}

interface CapacityRow {
  host_id: string;
  gpu_indices: number[];
  gpu_uuids: string[];
  free_indices: number[];
  reserved_gpu_type: string | null;
  reserved_gpu_count: number | null;
  reserved_by: string | null;
  rendezvous_address: string | null;
}

function errorCode(error: unknown): unknown {
  return (error as { code?: unknown; meta?: { code?: unknown } } | null)?.code;
}

function isRetryable(error: unknown): boolean {
  const text = String((error as Error)?.message ?? '');
  const code = errorCode(error);
  return code === DEADLOCK || code === SERIALIZATION || text.includes('deadlock detected');
}

/**
 * Commits gang placements and releases: the job's workloads are written in the same transaction that takes
 * the GPUs under the capacity rows' locks, and each host's materialised capacity is recomputed from what
 * holds GPUs (scheduler/capacity.ts counts training workloads that want to run), so nothing can take the
 * same GPUs between the two. The agents are told afterwards (FleetEvents).
 */
export class Launcher {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly events: FleetEvents,
  ) {}

  /**
   * Places the job's current attempt if it is still waiting (status queued, no placement): all workers or
   * none. `specOf` builds each worker's container.
   */
  async place(jobId: string, specOf: WorkerSpecOf): Promise<LaunchOutcome> {
    for (let attempt = 0; ; attempt++) {
      try {
        const outcome = await this.db.prisma.$transaction((tx) => this.#place(tx, jobId, specOf), TX_OPTIONS);
        if (outcome.kind === 'placed') {
          for (const hostId of new Set(outcome.workers.map((w) => w.hostId)))
            await this.events.desiredChanged(hostId);
        }
        return outcome;
      } catch (error) {
        if (attempt < 5 && isRetryable(error)) continue;
        throw error;
      }
    }
  }

  async #place(tx: Tx, jobId: string, specOf: WorkerSpecOf): Promise<LaunchOutcome> {
    const job = (
      await tx.$queryRawUnsafe<{ id: string }[]>(
        `SELECT id FROM training_jobs WHERE id = $1 AND status = 'queued' FOR UPDATE`,
        jobId,
      )
    )[0];
    if (!job) return { kind: 'gone' };
    const row = await tx.trainingJob.findUniqueOrThrow({ where: { id: jobId } });
    const rank0Id = workloadIdOf(row.id, row.attempt, 0);
    const rank0 = await tx.workload.findUnique({ where: { id: rank0Id } });
    const request: GangRequest = {
      workers: row.workers,
      gpusPerWorker: row.gpusPerWorker,
      rank0Host: rank0?.hostId ?? null,
    };
    const capacity = await tx.$queryRawUnsafe<CapacityRow[]>(
      `SELECT c.host_id, c.gpu_indices, c.gpu_uuids, c.free_indices,
              a.reserved_gpu_type, a.reserved_gpu_count, a.reserved_by,
              h.inventory->>'rendezvousAddress' AS rendezvous_address
         FROM host_capacity c
         JOIN hosts h ON h.id = c.host_id
         LEFT JOIN host_allocations a ON a.host_id = c.host_id
        WHERE c.gpu_type = $1 AND h.deleted_at IS NULL AND h.state = 'ready' AND NOT h.cordoned
        ORDER BY c.host_id
        FOR UPDATE OF c`,
      row.gpuType,
    );
    // A pending cluster's reservation keeps its GPUs: a job does not jump that queue.
    const hosts: HostFree[] = capacity.map((c) => {
      const reserved =
        c.reserved_by !== null && c.reserved_gpu_type === row.gpuType ? Number(c.reserved_gpu_count ?? 0) : 0;
      return {
        hostId: c.host_id,
        free: c.free_indices.slice(0, Math.max(0, c.free_indices.length - reserved)),
      };
    });
    let plan = planGang(hosts, request);
    const addressOf = new Map(
      capacity.flatMap((c) => (c.rendezvous_address ? [[c.host_id, c.rendezvous_address] as const] : [])),
    );
    if (plan && spansHosts(plan) && plan.some((p) => !addressOf.has(p.hostId))) {
      // Hosts without a rendezvous address take single-host gangs only.
      plan = planGang(
        hosts.filter((h) => addressOf.has(h.hostId)),
        request,
      );
    }
    if (!plan) {
      const totals = await tx.$queryRawUnsafe<{ host_id: string; total: number }[]>(
        `SELECT c.host_id, cardinality(c.gpu_indices)::int AS total FROM host_capacity c JOIN hosts h ON h.id = c.host_id
          WHERE c.gpu_type = $1 AND h.deleted_at IS NULL`,
        row.gpuType,
      );
      if (
        couldEverFit(
          totals.map((t) => ({ hostId: t.host_id, total: Number(t.total) })),
          request,
        )
      ) {
        return { kind: 'busy' };
      }
      const types = await tx.$queryRawUnsafe<{ gpu_type: string }[]>(
        `SELECT DISTINCT c.gpu_type FROM host_capacity c JOIN hosts h ON h.id = c.host_id
          WHERE h.deleted_at IS NULL AND cardinality(c.gpu_indices) > 0 ORDER BY 1`,
      );
      return { kind: 'impossible', availableGpuTypes: types.map((t) => t.gpu_type) };
    }
    const now = this.clock.now();
    const uuidsOf = new Map(capacity.map((c) => [c.host_id, c]));
    const workers: PlacedWorker[] = plan.map((p) => {
      const cap = uuidsOf.get(p.hostId)!;
      return {
        rank: p.rank,
        workloadId: workloadIdOf(row.id, row.attempt, p.rank),
        hostId: p.hostId,
        gpus: p.gpuIndices.map((index) => ({
          index,
          uuid: cap.gpu_uuids[cap.gpu_indices.indexOf(index)] ?? `GPU-index-${index}`,
        })),
        staleContainerId:
          p.rank === 0
            ? ((rank0?.actualStatus as { containerId?: string } | null)?.containerId ?? null)
            : null,
      };
    });
    const hostIds = [...new Set(workers.map((w) => w.hostId))].sort();
    for (const hostId of hostIds) await lockHost(tx, hostId);
    const rank0Host = workers[0]!.hostId;
    const rendezvous: Rendezvous = spansHosts(workers)
      ? {
          masterAddr: addressOf.get(rank0Host)!,
          masterPort: await freeRendezvousPort(tx, rank0Host, row.id),
          hostAddresses: new Map(hostIds.map((h) => [h, addressOf.get(h)!])),
        }
      : {
          masterAddr: `anvil-${workloadIdOf(row.id, row.attempt, 0)}`,
          masterPort: RENDEZVOUS_PORT,
          hostAddresses: null,
        };
    for (const hostId of hostIds) {
      const generation = await bumpGeneration(tx, hostId, now);
      if (generation === null) throw new Error(`host ${hostId} was deleted while placing ${row.id}`);
      for (const worker of workers.filter((w) => w.hostId === hostId)) {
        const spec = specOf(row, worker, rendezvous) as unknown as Prisma.InputJsonValue;
        await tx.workload.upsert({
          where: { id: worker.workloadId },
          create: {
            id: worker.workloadId,
            hostId,
            kind: 'training',
            ownerAccountId: row.accountId,
            spec,
            desired: 'running',
            generation,
            createdAt: now,
          },
          update: {
            spec,
            desired: 'running',
            phase: 'pending',
            actualStatus: Prisma.DbNull,
            actualAt: null,
            hostUnreachable: false,
            generation,
          },
        });
      }
      await refreshHost(tx, hostId);
    }
    const price = await tx.gpuPrice.findUnique({ where: { gpuType: row.gpuType } });
    await tx.trainingJob.update({
      where: { id: row.id },
      data: {
        status: 'pending',
        statusReason: 'starting containers',
        placement: workers as unknown as Prisma.InputJsonValue,
        hourlyRate: (price?.hourlyRate ?? 0) * row.gpusPerWorker * row.workers,
        queuedAt: null,
        updatedAt: now,
      },
    });
    return { kind: 'placed', workers };
  }

  /**
   * Gives the workers' GPUs back: rank 0's workload is stopped (container removed, volume kept for a
   * resume), the others deleted. Their agents remove the containers; a host that is unreachable does it
   * when it reconnects (its desired set no longer names them).
   */
  async release(workers: readonly PlacedWorker[]): Promise<void> {
    if (workers.length === 0) return;
    const hostIds = [...new Set(workers.map((w) => w.hostId))].sort();
    const now = this.clock.now();
    for (let attempt = 0; ; attempt++) {
      try {
        await this.db.prisma.$transaction(async (tx) => {
          for (const hostId of hostIds) {
            await lockHost(tx, hostId);
            const generation = await bumpGeneration(tx, hostId, now);
            if (generation === null) continue;
            for (const worker of workers.filter((w) => w.hostId === hostId)) {
              await tx.workload.updateMany({
                where: { id: worker.workloadId, desired: { not: 'deleted' } },
                data: { desired: worker.rank === 0 ? 'stopped' : 'deleted', generation },
              });
            }
            await refreshHost(tx, hostId);
          }
        }, TX_OPTIONS);
        break;
      } catch (error) {
        if (attempt < 5 && isRetryable(error)) continue;
        throw error;
      }
    }
    for (const hostId of hostIds) await this.events.desiredChanged(hostId);
  }
}

/**
 * The lowest port of RENDEZVOUS_PORTS that no other training workload wanted on the host publishes
 * (called under the host's row lock, so two placements never take the same port).
 */
async function freeRendezvousPort(tx: Tx, hostId: string, jobId: string): Promise<number> {
  const rows = await tx.$queryRawUnsafe<{ port: number }[]>(
    `SELECT DISTINCT (p.value)::int AS port
       FROM workloads w, jsonb_array_elements(w.spec->'rendezvous'->'publish') p(value)
      WHERE w.host_id = $1 AND w.kind = 'training' AND w.desired = 'running'
        AND jsonb_typeof(w.spec->'rendezvous'->'publish') = 'array'
        AND w.spec->'labels'->>'anvil.training-job' <> $2`,
    hostId,
    jobId,
  );
  const taken = new Set(rows.map((r) => Number(r.port)));
  for (let port = RENDEZVOUS_PORTS.first; port <= RENDEZVOUS_PORTS.last; port++)
    if (!taken.has(port)) return port;
  throw new Error(`no free rendezvous port on host ${hostId}`);
}

async function bumpGeneration(tx: Tx, hostId: string, now: Date): Promise<number | null> {
  const rows = await tx.$queryRawUnsafe<{ desired_generation: number }[]>(
    `UPDATE hosts SET desired_generation = desired_generation + 1, updated_at = $2
      WHERE id = $1 AND deleted_at IS NULL RETURNING desired_generation`,
    hostId,
    now,
  );
  return rows[0] ? Number(rows[0].desired_generation) : null;
}

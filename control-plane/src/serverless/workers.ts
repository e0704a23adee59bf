import { ApiError, newId } from '@anvil/shared';
import { WorkloadSpec } from '@anvil/shared/protocol';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Clock } from '../auth/clock.ts';
import { closeWorkerSession } from '../billing/worker-sessions.ts';
import type { Endpoint, EndpointWorker, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import { TX_OPTIONS } from '../scheduler/allocator.ts';
import { lockHost, refreshHost } from '../scheduler/capacity.ts';
import { RESERVATION_COUNTS } from '../scheduler/reservations.ts';

type Tx = Prisma.TransactionClient;

import { workerLimits } from '../fleet/workloads/limits.ts';
import { runpodWorkerEnv } from './runpod/environment.ts';

const specCheck = TypeCompiler.Compile(WorkloadSpec);

export type PlaceOutcome =
  | { kind: 'placed'; worker: EndpointWorker }
  | { kind: 'busy' }
  | { kind: 'impossible' };

/**
 * Hosts that could take a worker now: ready, not cordoned, with enough free GPUs of the type, leaving a
 * cluster's reservation what it needs (scheduler/reservations.ts). Best fit as the cluster scheduler
 * (fewest free GPUs left), but hosts already running a worker of this endpoint come last, so one host
 * dying takes as few of its workers as possible.
 */
const CANDIDATES_SQL = `
  SELECT c.host_id FROM host_capacity c
    JOIN hosts h ON h.id = c.host_id
    JOIN host_allocations a ON a.host_id = c.host_id
   WHERE c.gpu_type = $1 AND c.free_count >= $2
     AND h.deleted_at IS NULL AND h.state = 'ready' AND NOT h.cordoned
     AND (a.reserved_by IS NULL OR a.reserved_gpu_type IS DISTINCT FROM $1
          OR c.free_count - $2 >= a.reserved_gpu_count OR NOT ${RESERVATION_COUNTS})
   ORDER BY EXISTS (SELECT 1 FROM endpoint_workers w WHERE w.host_id = c.host_id AND w.endpoint_id = $3
                     AND w.status IN ('starting', 'ready')), c.free_count, c.host_id
   LIMIT 5`;

/** Could any host, empty, ever hold a worker (GPU type and count)? */
const COULD_FIT_SQL = `
  SELECT EXISTS (SELECT 1 FROM host_capacity c JOIN hosts h ON h.id = c.host_id
                  WHERE h.deleted_at IS NULL AND c.gpu_type = $1 AND cardinality(c.gpu_indices) >= $2) AS could_fit,
         ARRAY(SELECT DISTINCT c.gpu_type FROM host_capacity c JOIN hosts h ON h.id = c.host_id
                WHERE h.deleted_at IS NULL AND cardinality(c.gpu_indices) > 0 ORDER BY 1) AS gpu_types`;

/**
 * The container of a worker (the worker contract's environment). A runpod worker also gets RunPod's
 * variables and the URLs the agent completes with its worker API address (runpod/environment.ts); its
 * token (RUNPOD_AI_API_KEY) is added as the spec is sent, never stored.
 */
export function workerSpecOf(endpoint: Endpoint, workerId: string, gpus: { index: number; uuid: string }[]) {
  const spec = {
    workloadId: workerId,
    image: endpoint.dockerImage,
    command: endpoint.command.length > 0 ? endpoint.command : null,
    entrypoint: null,
    env: {
      ...(endpoint.env as Record<string, string>),
      ANVIL_ENDPOINT_ID: endpoint.id,
      ANVIL_WORKER_ID: workerId,
      ANVIL_WORKER_PORT: String(endpoint.workerPort),
      ANVIL_MAX_CONCURRENCY: String(endpoint.maxConcurrency),
      ANVIL_GPU_COUNT: String(endpoint.gpuCount),
      ...(endpoint.workerProtocol === 'runpod' ? runpodWorkerEnv(endpoint, workerId).env : {}),
    },
    ...(endpoint.workerProtocol === 'runpod'
      ? { workerApi: runpodWorkerEnv(endpoint, workerId).workerApi }
      : {}),
    labels: { 'anvil.endpoint': endpoint.id, 'anvil.account': endpoint.accountId },
    gpus,
    accountId: endpoint.accountId,
    ...workerLimits(endpoint.gpuCount),
    shmBytes: null,
    ports: [],
    volume: null,
    // A worker that exits is replaced by the supervisor (a new one, maybe elsewhere), not restarted in place.
    restartPolicy: { name: 'no' as const, maxRetries: 0 },
    stopGraceSeconds: 10,
  };
  if (!specCheck.Check(spec)) {
    const error = specCheck.Errors(spec).First();
    throw new ApiError(
      'VALIDATION_ERROR',
      `worker spec ${error?.path ?? ''} ${error?.message ?? 'is invalid'}`,
      {
        field: error?.path ?? 'spec',
        reason: error?.message ?? 'is invalid',
      },
    );
  }
  return spec;
}

/**
 * Places and removes endpoint workers. A worker is a workload of kind endpoint_worker whose spec holds its
 * GPUs; the capacity index counts such workloads (scheduler/capacity.ts), so clusters and workers never
 * share a GPU. A placement is one transaction: the host row (desired generation, as every workload change),
 * then the host's capacity rows in the order every writer locks them (lockHost), the free indices read
 * under that lock, the workload and worker rows written, and the host's capacity recomputed from them.
 */
export class WorkerPlacer {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly fleet: Pick<Fleet, 'events' | 'workloads'>,
  ) {}

  async couldEverFit(gpuType: string, gpuCount: number): Promise<{ couldFit: boolean; gpuTypes: string[] }> {
    const [row] = await this.db.sql.query<{ could_fit: boolean; gpu_types: string[] }>(COULD_FIT_SQL, [
      gpuType,
      gpuCount,
    ]);
    return { couldFit: row?.could_fit === true, gpuTypes: row?.gpu_types ?? [] };
  }

  async place(endpoint: Endpoint): Promise<PlaceOutcome> {
    const candidates = await this.db.sql.query<{ host_id: string }>(CANDIDATES_SQL, [
      endpoint.gpuType,
      endpoint.gpuCount,
      endpoint.id,
    ]);
    for (const { host_id: hostId } of candidates) {
      const worker = await this.#placeOn(endpoint, hostId).catch((error: unknown) => {
        // Deadlock with another writer of this host: try the next host (or the next pass).
        if ((error as { code?: string }).code === '40P01') return null;
        throw error;
      });
      if (worker) {
        await this.fleet.events.desiredChanged(hostId);
        return { kind: 'placed', worker };
      }
    }
    const { couldFit } = await this.couldEverFit(endpoint.gpuType, endpoint.gpuCount);
    return couldFit ? { kind: 'busy' } : { kind: 'impossible' };
  }

  async #placeOn(endpoint: Endpoint, hostId: string): Promise<EndpointWorker | null> {
    const now = this.clock.now();
    const workerId = newId('wl');
    return this.db.prisma.$transaction(async (tx: Tx) => {
      const hosts = await tx.$queryRawUnsafe<{ desired_generation: number; inventory: unknown }[]>(
        `UPDATE hosts SET desired_generation = desired_generation + 1, updated_at = $2
          WHERE id = $1 AND deleted_at IS NULL AND state = 'ready' AND NOT cordoned
          RETURNING desired_generation, inventory`,
        hostId,
        now,
      );
      const host = hosts[0];
      if (!host) return null;
      await lockHost(tx, hostId);
      const [capacity] = await tx.$queryRawUnsafe<
        { free_indices: number[]; gpu_indices: number[]; gpu_uuids: string[] }[]
      >(
        'SELECT free_indices, gpu_indices, gpu_uuids FROM host_capacity WHERE host_id = $1 AND gpu_type = $2',
        hostId,
        endpoint.gpuType,
      );
      if (!capacity || capacity.free_indices.length < endpoint.gpuCount) return null;
      const indices = capacity.free_indices.slice(0, endpoint.gpuCount);
      const gpus = indices.map((index) => ({
        index,
        uuid: capacity.gpu_uuids[capacity.gpu_indices.indexOf(index)] ?? `GPU-index-${index}`,
      }));
      const spec = workerSpecOf(endpoint, workerId, gpus);
      // The worker's rate is fixed at placement, as a cluster's: a price change applies to later workers.
      const price = await tx.gpuPrice.findUnique({ where: { gpuType: endpoint.gpuType } });
      await tx.workload.create({
        data: {
          id: workerId,
          hostId,
          kind: 'endpoint_worker',
          ownerAccountId: endpoint.accountId,
          spec: spec as unknown as Prisma.InputJsonValue,
          desired: 'running',
          generation: Number(host.desired_generation),
          createdAt: now,
        },
      });
      const worker = await tx.endpointWorker.create({
        data: {
          id: workerId,
          endpointId: endpoint.id,
          accountId: endpoint.accountId,
          hostId,
          gpuIndices: indices,
          configVersion: endpoint.configVersion,
          status: 'starting',
          hourlyRate: (price?.hourlyRate ?? 0) * endpoint.gpuCount,
          createdAt: now,
          updatedAt: now,
        },
      });
      await refreshHost(tx, hostId);
      return worker;
    }, TX_OPTIONS);
  }

  /**
   * The worker's container is removed (desired deleted: its agent removes it, now or when it reconnects)
   * and its GPUs are given back to the capacity index; the worker row keeps its final status. Its open
   * billing session closes with it (billing/worker-sessions.ts).
   */
  async remove(
    worker: EndpointWorker,
    status: 'stopped' | 'failed' | 'lost',
    reason: string | null,
  ): Promise<void> {
    const now = this.clock.now();
    const workload = await this.db.prisma.workload.findUnique({ where: { id: worker.id } });
    if (workload && workload.desired !== 'deleted')
      await this.fleet.workloads.setDesired(worker.id, 'deleted');
    await this.db.prisma.$transaction(async (tx: Tx) => {
      await lockHost(tx, worker.hostId);
      await tx.endpointWorker.updateMany({
        where: { id: worker.id, status: { in: ['starting', 'ready', 'draining'] } },
        data: { status, statusReason: reason, stoppedAt: now, updatedAt: now },
      });
      await closeWorkerSession(tx, worker, now, status);
      await refreshHost(tx, worker.hostId);
    }, TX_OPTIONS);
  }
}

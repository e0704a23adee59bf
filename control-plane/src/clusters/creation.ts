import type { WorkloadSpec as WorkloadSpecValue } from '@anvil/shared/protocol';
import type { Cluster, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Placement, PlacementRequest } from '../scheduler/placement.ts';
import { requestParams } from '../scheduler/placement-sql.ts';
import { createStatement } from './create-sql.ts';

/** A cluster to create: its columns as the create request resolved them, and who creates it. */
export interface NewCluster {
  id: string;
  accountId: string;
  ownerId: string;
  name: string;
  description: string | null;
  projectId: string | null;
  templateId: string | null;
  dockerImage: string;
  command: string[];
  env: Record<string, string>;
  ports: unknown[];
  sshEnabled: boolean;
  expiresAt: Date | null;
  createdAt: Date;
}

const DEADLOCK_DETECTED = '40P01';

/** What a cluster asks for: its GPUs, CPU, memory and disk, and its region (null: any). */
export type ClusterSizes = Pick<
  Cluster,
  'gpuType' | 'gpuCount' | 'cpuCores' | 'memoryGb' | 'storageGb' | 'region'
>;

/** The row `cluster` will be before it is placed (pending), for what is derived from a row (its spec). */
export function clusterDraft(cluster: NewCluster, sizes: ClusterSizes): Cluster {
  return {
    ...cluster,
    gpuType: sizes.gpuType,
    gpuCount: sizes.gpuCount,
    cpuCores: sizes.cpuCores,
    memoryGb: sizes.memoryGb,
    storageGb: sizes.storageGb,
    region: sizes.region,
    ports: cluster.ports as Prisma.JsonArray,
    status: 'pending',
    statusReason: null,
    hostId: null,
    gpuIndices: [],
    queuedAt: null,
    hourlyRate: 0,
    sessionStartedAt: null,
    operation: null,
    updatedAt: cluster.createdAt,
    deletedAt: null,
  };
}

export interface CreateOptions {
  /** Where and how much: the cluster's sizes, its region, a host it must go to (null: any). */
  request: PlacementRequest;
  /** The workload spec the agent gets (validated; its `gpus` are filled with the GPUs placed on). */
  spec: WorkloadSpecValue;
  /** The status reason of a cluster inserted pending (no host has room now). */
  pendingReason: string;
  /** The region the cluster asked for (null: it takes its host's). */
  region: string | null;
  /** Write nothing unless it is placed now (a cluster from a snapshot must go to the snapshot's host). */
  placedOnly: boolean;
}

export type CreateOutcome =
  /** Registered, inserted `starting` with its GPUs, its workload in the host's desired set: committed. */
  | { kind: 'placed'; cluster: Cluster; placement: Placement }
  /** Registered and inserted `pending`: no host has room now (or every one was locked at that moment). */
  | { kind: 'pending'; cluster: Cluster }
  /** Nothing written: no host could ever fit it (impossible), or, placedOnly, none had room now (busy). */
  | { kind: 'refused'; couldFit: boolean };

interface CreateRow {
  could_fit: boolean | null;
  gpu_uuids: string[] | null;
  id: string | null;
  status: string;
  status_reason: string | null;
  region: string | null;
  host_id: string | null;
  gpu_indices: number[];
  hourly_rate: number;
}

/**
 * Creates a cluster in one statement and one commit: registered, inserted and placed together
 * (create-sql.ts), so a create is one round trip and a failure leaves nothing to undo. The placement comes
 * back with the host and the GPUs' UUIDs; pushing the host's desired set to its agent is the caller's, after
 * this returned (committed).
 */
export class ClusterCreation {
  constructor(private readonly db: Database) {}

  async create(cluster: NewCluster, options: CreateOptions): Promise<CreateOutcome> {
    const { request } = options;
    // A pinned create waits for its one host's lock rather than call a momentarily locked host busy.
    const { name, text } = createStatement({
      waitForLocks: request.hostId !== null,
      region: request.region !== null,
      pinned: request.hostId !== null,
    });
    const [row] = await this.#run(text, name, [
      cluster.id,
      ...requestParams(request),
      cluster.createdAt,
      cluster.accountId,
      cluster.ownerId,
      cluster.name,
      cluster.description,
      cluster.projectId,
      cluster.templateId,
      cluster.dockerImage,
      cluster.command,
      JSON.stringify(cluster.env),
      JSON.stringify(cluster.ports),
      cluster.sshEnabled,
      cluster.expiresAt,
      JSON.stringify(options.spec),
      options.pendingReason,
      options.placedOnly,
      options.region,
    ]);
    if (!row?.id) return { kind: 'refused', couldFit: row?.could_fit === true };
    // The row as inserted: the parameters, and what the placement decided.
    const created: Cluster = {
      ...clusterDraft(cluster, { ...request, region: row.region }),
      status: row.status,
      statusReason: row.status_reason,
      hostId: row.host_id,
      gpuIndices: row.gpu_indices,
      hourlyRate: Number(row.hourly_rate),
    };
    if (created.hostId === null) return { kind: 'pending', cluster: created };
    return {
      kind: 'placed',
      cluster: created,
      placement: {
        hostId: created.hostId,
        gpus: created.gpuIndices.map((index, i) => ({
          index,
          uuid: row.gpu_uuids?.[i] ?? `GPU-index-${index}`,
        })),
      },
    };
  }

  /**
   * Runs the statement; again when PostgreSQL broke a deadlock by rolling it back (nothing was written):
   * a capacity sync locks the capacity tables whole, in an order a running statement may not share.
   */
  async #run(text: string, name: string, params: unknown[]): Promise<CreateRow[]> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.db.sql.query<CreateRow>(text, params, name);
      } catch (error) {
        if ((error as { code?: unknown } | null)?.code !== DEADLOCK_DETECTED || attempt >= 3) throw error;
      }
    }
  }
}

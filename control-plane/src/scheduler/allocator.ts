import type { Clock } from '../auth/clock.ts';
import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { REFRESH_FREE_SQL, syncCapacity, TAKEN_INDICES_SQL } from './capacity.ts';
import type { GpuType } from './gpu-types.ts';
import {
  availableGpuTypes,
  couldEverFit,
  fitNow,
  type HostCandidate,
  type Placement,
  type PlacementRequest,
} from './placement.ts';

type Tx = Prisma.TransactionClient;

/**
 * Interactive transactions here wait for row locks; on a loaded machine Prisma's default 5 s can pass
 * while the lock holder is merely slow, so they get more room.
 */
export const TX_OPTIONS = { maxWait: 10_000, timeout: 30_000 } as const;

/** How many best-fit candidates one attempt looks at before concluding that capacity is busy. */
const CANDIDATES = 8;

export type AllocationOutcome =
  | { kind: 'placed'; placement: Placement; hourlyRate: number }
  /** Capacity exists in the fleet but is taken (or its hosts are cordoned or unreachable): wait. */
  | { kind: 'busy' }
  /** No host could ever fit the request. */
  | { kind: 'impossible'; availableGpuTypes: GpuType[] }
  /** The cluster is no longer waiting for a placement (deleted, or placed by another replica). */
  | { kind: 'gone' };

interface CapacityRow {
  host_id: string;
  gpu_type: string;
  gpu_indices: number[];
  gpu_uuids: string[];
  cpu_threads: number | null;
  memory_gb: number | null;
  disk_gb: number | null;
}

class Gone extends Error {}

function pgIntArray(values: readonly number[]): string {
  return `{${values.map((v) => Math.trunc(v)).join(',')}}`;
}

/** A host as the pure placement function sees it, from its capacity rows and what is taken there. */
function candidateOf(
  hostId: string,
  region: string | null,
  schedulable: boolean,
  rows: CapacityRow[],
  taken: number[],
  used: HostCandidate['used'],
): HostCandidate {
  const gpus: HostCandidate['gpus'] = {};
  for (const row of rows) {
    gpus[row.gpu_type as GpuType] = row.gpu_indices.map((index, i) => ({
      index,
      uuid: row.gpu_uuids[i] ?? '',
    }));
  }
  const first = rows[0];
  return {
    hostId,
    region,
    schedulable,
    gpus,
    takenGpuIndices: taken,
    cpuThreads: first?.cpu_threads ?? null,
    memoryGb: first?.memory_gb ?? null,
    diskGb: first?.disk_gb ?? null,
    used,
  };
}

/**
 * Commits placements. Candidates come from the capacity index (best fit first: fewest free GPUs of the
 * type); each is then locked (`SELECT … FOR UPDATE` on its host_capacity rows), re-read from the allocations
 * themselves and handed to the pure placement function, and the cluster row takes the GPUs in the
 * same transaction. Two creates — on this replica or another — can therefore never get the same GPU:
 * the second one waits for the lock and then sees the first one's GPUs taken.
 */
export class Allocator {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  sync(): Promise<void> {
    return syncCapacity(this.db);
  }

  /**
   * Places the pending cluster `clusterId`. Tries the best candidates, skipping hosts locked by another
   * placement at that moment (so parallel creates spread over hosts), then waits for the lock of the
   * best one before concluding. On busy or impossible, the capacity index is rebuilt once and the
   * attempt repeated, so a host that joined a moment ago is seen.
   */
  async allocate(clusterId: string, request: PlacementRequest): Promise<AllocationOutcome> {
    for (let round = 0; round < 2; round++) {
      const candidates = await this.candidates(request);
      for (const skipLocked of [true, false]) {
        for (const hostId of skipLocked ? candidates : candidates.slice(0, 1)) {
          const outcome = await this.tryHost(clusterId, hostId, request, skipLocked);
          if (outcome) return outcome;
        }
      }
      if (round === 0) await this.sync();
    }
    return this.classify(request);
  }

  private async candidates(request: PlacementRequest): Promise<string[]> {
    const rows = await this.db.prisma.$queryRawUnsafe<{ host_id: string }[]>(
      `SELECT c.host_id FROM host_capacity c JOIN hosts h ON h.id = c.host_id
        WHERE c.gpu_type = $1 AND c.free_count >= $2 AND h.deleted_at IS NULL AND h.state = 'ready' AND NOT h.cordoned
          AND ($3::text IS NULL OR h.region = $3) AND ($4::text IS NULL OR c.host_id = $4)
        ORDER BY c.free_count, c.host_id LIMIT ${CANDIDATES}`,
      request.gpuType,
      request.gpuCount,
      request.region,
      request.hostId,
    );
    return rows.map((r) => r.host_id);
  }

  /** One locked attempt on one host; null when it does not fit (or is locked and `skipLocked`). */
  private async tryHost(
    clusterId: string,
    hostId: string,
    request: PlacementRequest,
    skipLocked: boolean,
  ): Promise<AllocationOutcome | null> {
    try {
      return await this.db.prisma.$transaction(async (tx) => {
        // The lock: the host's capacity rows. Heartbeats and desired-state changes write the hosts row
        // often; placements and releases are the only writers here, so they serialise on this alone.
        const locked = await tx.$queryRawUnsafe<{ host_id: string }[]>(
          `SELECT host_id FROM host_capacity WHERE host_id = $1 ORDER BY gpu_type
           FOR UPDATE${skipLocked ? ' SKIP LOCKED' : ''}`,
          hostId,
        );
        if (locked.length === 0) return null;
        const hosts = await tx.$queryRawUnsafe<{ id: string; region: string | null }[]>(
          `SELECT id, region FROM hosts WHERE id = $1 AND deleted_at IS NULL AND state = 'ready' AND NOT cordoned`,
          hostId,
        );
        const host = hosts[0];
        if (!host) return null;
        const candidate = await this.loadLocked(tx, hostId, host.region, clusterId);
        const gpus = fitNow(candidate, request);
        if (!gpus) {
          // The index was stale: repair this host's counts so the next attempt skips it.
          await tx.$executeRawUnsafe(REFRESH_FREE_SQL, hostId);
          return null;
        }
        const now = this.clock.now();
        const placed = await tx.$queryRawUnsafe<{ hourly_rate: number }[]>(
          `UPDATE clusters SET host_id = $2, gpu_indices = $3::int[], status = 'starting', status_reason = NULL,
             region = COALESCE(clusters.region, $5::text),
             hourly_rate = COALESCE((SELECT p.hourly_rate FROM gpu_prices p WHERE p.gpu_type = clusters.gpu_type), 0) * gpu_count,
             updated_at = $4
           WHERE id = $1 AND status = 'pending' AND deleted_at IS NULL
           RETURNING hourly_rate`,
          clusterId,
          hostId,
          pgIntArray(gpus.map((g) => g.index)),
          now,
          host.region,
        );
        if (!placed[0]) throw new Gone();
        await tx.$executeRawUnsafe(REFRESH_FREE_SQL, hostId);
        return {
          kind: 'placed' as const,
          placement: { hostId, gpus },
          hourlyRate: Number(placed[0].hourly_rate),
        };
      }, TX_OPTIONS);
    } catch (error) {
      if (error instanceof Gone) return { kind: 'gone' };
      throw error;
    }
  }

  private async loadLocked(
    tx: Tx,
    hostId: string,
    region: string | null,
    clusterId: string,
  ): Promise<HostCandidate> {
    const rows = await tx.$queryRawUnsafe<CapacityRow[]>(
      'SELECT host_id, gpu_type, gpu_indices, gpu_uuids, cpu_threads, memory_gb, disk_gb FROM host_capacity WHERE host_id = $1',
      hostId,
    );
    const taken = await tx.$queryRawUnsafe<{ index: number }[]>(TAKEN_INDICES_SQL, hostId);
    const used = await tx.$queryRawUnsafe<{ cpu: number | null; mem: number | null; disk: number | null }[]>(
      `SELECT sum(cpu_cores)::int AS cpu, sum(memory_gb)::int AS mem, sum(storage_gb)::int AS disk FROM clusters
        WHERE host_id = $1 AND cardinality(gpu_indices) > 0 AND id <> $2`,
      hostId,
      clusterId,
    );
    const u = used[0];
    return candidateOf(
      hostId,
      region,
      true,
      rows,
      taken.map((t) => Number(t.index)),
      { cpuCores: Number(u?.cpu ?? 0), memoryGb: Number(u?.mem ?? 0), storageGb: Number(u?.disk ?? 0) },
    );
  }

  /** After a failed attempt: busy (some host could ever fit) or impossible (none could), with the types there are. */
  async classify(request: PlacementRequest): Promise<AllocationOutcome> {
    const rows = await this.db.prisma.$queryRawUnsafe<(CapacityRow & { region: string | null })[]>(
      `SELECT c.host_id, c.gpu_type, c.gpu_indices, c.gpu_uuids, c.cpu_threads, c.memory_gb, c.disk_gb, h.region
         FROM host_capacity c JOIN hosts h ON h.id = c.host_id WHERE h.deleted_at IS NULL`,
    );
    const byHost = new Map<string, (CapacityRow & { region: string | null })[]>();
    for (const row of rows) byHost.set(row.host_id, [...(byHost.get(row.host_id) ?? []), row]);
    const hosts = [...byHost].map(([hostId, list]) =>
      candidateOf(hostId, list[0]?.region ?? null, false, list, [], {
        cpuCores: 0,
        memoryGb: 0,
        storageGb: 0,
      }),
    );
    if (hosts.some((h) => couldEverFit(h, request))) return { kind: 'busy' };
    return { kind: 'impossible', availableGpuTypes: availableGpuTypes(hosts, request.region) };
  }

  /**
   * Gives a cluster's GPUs back (stop, delete, error) in the caller's transaction, after locking the
   * host so a placement running at the same moment sees either the old or the new allocation whole.
   */
  async release(tx: Tx, clusterId: string): Promise<void> {
    const rows = await tx.$queryRawUnsafe<{ host_id: string | null }[]>(
      'SELECT host_id FROM clusters WHERE id = $1',
      clusterId,
    );
    const hostId = rows[0]?.host_id;
    if (!hostId) return;
    await tx.$queryRawUnsafe(
      'SELECT host_id FROM host_capacity WHERE host_id = $1 ORDER BY gpu_type FOR UPDATE',
      hostId,
    );
    await tx.$executeRawUnsafe(
      `UPDATE clusters SET gpu_indices = '{}', updated_at = $2 WHERE id = $1`,
      clusterId,
      this.clock.now(),
    );
    await tx.$executeRawUnsafe(REFRESH_FREE_SQL, hostId);
  }
}

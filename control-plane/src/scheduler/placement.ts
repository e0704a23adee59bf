import type { GpuType } from './gpu-types.ts';

/**
 * Pure placement (DESIGN.md, Scheduling): hosts with their GPUs, what is already taken and what is
 * reserved, and a request, in; a host and concrete GPU indices out. No database, no clock. This is the
 * rule the placement statement (placement-sql.ts) commits in one round trip; the allocator tests hold
 * the statement to this function on random fleets, so a change to the rule is made here and there.
 */

export interface GpuSlot {
  index: number;
  uuid: string;
}

export interface HostCandidate {
  hostId: string;
  region: string | null;
  /** Ready (heartbeats arrive), not cordoned, not deleted. Unschedulable hosts still count for "could ever fit". */
  schedulable: boolean;
  /** This host's GPUs of each type. */
  gpus: Partial<Record<GpuType, GpuSlot[]>>;
  /** GPU indices held by clusters and other workloads, whatever their type. */
  takenGpuIndices: readonly number[];
  /** Capacity from the inventory; null when the agent could not tell (then not a constraint). */
  cpuThreads: number | null;
  memoryGb: number | null;
  diskGb: number | null;
  /** What placed clusters hold on this host. */
  used: { cpuCores: number; memoryGb: number; storageGb: number };
  /** The host's reservation for a pending cluster (reservations.ts), when it still counts. */
  reservation?: Reservation | null;
}

/** What a pending cluster holds a host for: others may take only what it does not need. */
export interface Reservation {
  clusterId: string;
  gpuType: GpuType;
  gpuCount: number;
  cpuCores: number;
  memoryGb: number;
  storageGb: number;
}

export interface PlacementRequest {
  gpuType: GpuType;
  gpuCount: number;
  cpuCores: number;
  memoryGb: number;
  storageGb: number;
  /** Only hosts labelled with this region; null: any region. */
  region: string | null;
  /** Only this host (a stopped cluster restarts where its volume lives); null: any host. */
  hostId: string | null;
}

export interface Placement {
  hostId: string;
  gpus: GpuSlot[];
}

function matchesConstraints(host: HostCandidate, request: PlacementRequest): boolean {
  if (request.region !== null && host.region !== request.region) return false;
  if (request.hostId !== null && host.hostId !== request.hostId) return false;
  return true;
}

type Sizes = Pick<PlacementRequest, 'cpuCores' | 'memoryGb' | 'storageGb'>;

function withinTotals(host: HostCandidate, request: Sizes, used: HostCandidate['used']): boolean {
  const fits = (total: number | null, taken: number, want: number) => total === null || taken + want <= total;
  return (
    fits(host.cpuThreads, used.cpuCores, request.cpuCores) &&
    fits(host.memoryGb, used.memoryGb, request.memoryGb) &&
    fits(host.diskGb, used.storageGb, request.storageGb)
  );
}

/**
 * The GPUs this host would give the request of cluster `clusterId` now (lowest free indices), or null
 * when it cannot. On a host reserved for another cluster, only what the reservation does not need can
 * be taken: afterwards the reserved GPUs of its type and its CPU, memory and disk must still be free.
 */
export function fitNow(
  host: HostCandidate,
  request: PlacementRequest,
  clusterId: string | null = null,
): GpuSlot[] | null {
  if (!host.schedulable || !matchesConstraints(host, request)) return null;
  const taken = new Set(host.takenGpuIndices);
  const free = (host.gpus[request.gpuType] ?? []).filter((g) => !taken.has(g.index));
  if (free.length < request.gpuCount) return null;
  if (!withinTotals(host, request, host.used)) return null;
  const reserved = host.reservation;
  if (reserved && reserved.clusterId !== clusterId) {
    if (reserved.gpuType === request.gpuType && free.length - request.gpuCount < reserved.gpuCount)
      return null;
    const both = {
      cpuCores: request.cpuCores + reserved.cpuCores,
      memoryGb: request.memoryGb + reserved.memoryGb,
      storageGb: request.storageGb + reserved.storageGb,
    };
    if (!withinTotals(host, both, host.used)) return null;
  }
  return [...free].sort((a, b) => a.index - b.index).slice(0, request.gpuCount);
}

/** True when the host, empty, would fit the request: capacity exists even if busy, cordoned or unreachable. */
export function couldEverFit(host: HostCandidate, request: PlacementRequest): boolean {
  if (!matchesConstraints(host, request)) return false;
  if ((host.gpus[request.gpuType] ?? []).length < request.gpuCount) return false;
  return withinTotals(host, request, { cpuCores: 0, memoryGb: 0, storageGb: 0 });
}

/**
 * Best fit: among hosts that fit now, the one left with the fewest free GPUs of the type (then the
 * smallest id), so large hosts stay whole for large requests. The order is the one an index on (type,
 * free GPUs, host) walks, so the placement statement finds the best host without sorting the fleet.
 */
export function place(
  hosts: readonly HostCandidate[],
  request: PlacementRequest,
  clusterId: string | null = null,
): Placement | null {
  let best: { placement: Placement; freeAfter: number } | null = null;
  for (const host of hosts) {
    const gpus = fitNow(host, request, clusterId);
    if (!gpus) continue;
    const taken = new Set(host.takenGpuIndices);
    const freeAfter =
      (host.gpus[request.gpuType] ?? []).filter((g) => !taken.has(g.index)).length - gpus.length;
    if (
      !best ||
      freeAfter < best.freeAfter ||
      (freeAfter === best.freeAfter && host.hostId < best.placement.hostId)
    ) {
      best = { placement: { hostId: host.hostId, gpus }, freeAfter };
    }
  }
  return best?.placement ?? null;
}

/** The GPU types present in the fleet (within the request's region when it names one), sorted. */
export function availableGpuTypes(hosts: readonly HostCandidate[], region: string | null): GpuType[] {
  const types = new Set<GpuType>();
  for (const host of hosts) {
    if (region !== null && host.region !== region) continue;
    for (const [type, slots] of Object.entries(host.gpus))
      if (slots && slots.length > 0) types.add(type as GpuType);
  }
  return [...types].sort();
}

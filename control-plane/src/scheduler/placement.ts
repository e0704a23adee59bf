import type { GpuType } from './gpu-types.ts';

/**
 * Pure placement (DESIGN.md, Scheduling): hosts with their GPUs and what is already taken, and a
 * request, in; a host and concrete GPU indices out. No database, no clock: the allocator feeds it the
 * rows it holds locked, and tests feed it tables.
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

function withinTotals(host: HostCandidate, request: PlacementRequest, used: HostCandidate['used']): boolean {
  const fits = (total: number | null, taken: number, want: number) => total === null || taken + want <= total;
  return (
    fits(host.cpuThreads, used.cpuCores, request.cpuCores) &&
    fits(host.memoryGb, used.memoryGb, request.memoryGb) &&
    fits(host.diskGb, used.storageGb, request.storageGb)
  );
}

/** The GPUs this host would give the request now (lowest free indices), or null when it cannot. */
export function fitNow(host: HostCandidate, request: PlacementRequest): GpuSlot[] | null {
  if (!host.schedulable || !matchesConstraints(host, request)) return null;
  const taken = new Set(host.takenGpuIndices);
  const free = (host.gpus[request.gpuType] ?? []).filter((g) => !taken.has(g.index));
  if (free.length < request.gpuCount) return null;
  if (!withinTotals(host, request, host.used)) return null;
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
 * fewest free CPU threads, then the smallest id), so large hosts stay whole for large requests.
 */
export function place(hosts: readonly HostCandidate[], request: PlacementRequest): Placement | null {
  let best: { placement: Placement; key: [number, number, string] } | null = null;
  for (const host of hosts) {
    const gpus = fitNow(host, request);
    if (!gpus) continue;
    const taken = new Set(host.takenGpuIndices);
    const freeAfter =
      (host.gpus[request.gpuType] ?? []).filter((g) => !taken.has(g.index)).length - gpus.length;
    const cpuAfter =
      host.cpuThreads === null
        ? Number.MAX_SAFE_INTEGER
        : host.cpuThreads - host.used.cpuCores - request.cpuCores;
    const key: [number, number, string] = [freeAfter, cpuAfter, host.hostId];
    if (
      !best ||
      key[0] < best.key[0] ||
      (key[0] === best.key[0] && (key[1] < best.key[1] || (key[1] === best.key[1] && key[2] < best.key[2])))
    ) {
      best = { placement: { hostId: host.hostId, gpus }, key };
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

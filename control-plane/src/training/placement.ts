/**
 * Gang placement (DESIGN.md, Scheduling): a job with N workers of G GPUs each starts only when all N fit
 * at once. The plan is a pure function; the commit takes the GPUs in one transaction holding the capacity
 * rows' locks (the same rows the cluster placement statement locks), so clusters and jobs never get the
 * same GPU, on this replica or another.
 */

export interface HostFree {
  hostId: string;
  /** Free GPU indices of the requested type, ascending (a pending cluster's reservation already taken off). */
  free: number[];
}

export interface GangRequest {
  workers: number;
  gpusPerWorker: number;
  /** Rank 0 must go here (its volume holds the checkpoints a resume needs); null: anywhere. */
  rank0Host: string | null;
}

export interface WorkerPlacement {
  rank: number;
  hostId: string;
  gpuIndices: number[];
}

/**
 * Where each rank goes, or null when the workers do not all fit now. All workers on one host when one host
 * can take them (the host with the fewest free GPUs that can: best fit, as clusters are placed); otherwise
 * spread over the hosts with the most room first, so the gang touches as few hosts as it can. Ties by host
 * id, GPUs lowest index first.
 */
export function planGang(hosts: readonly HostFree[], request: GangRequest): WorkerPlacement[] | null {
  const { workers, gpusPerWorker, rank0Host } = request;
  const slots = (h: HostFree) => Math.floor(h.free.length / gpusPerWorker);
  const byId = (a: HostFree, b: HostFree) => (a.hostId < b.hostId ? -1 : a.hostId > b.hostId ? 1 : 0);
  let order: HostFree[];
  if (rank0Host !== null) {
    const pinned = hosts.find((h) => h.hostId === rank0Host);
    if (!pinned || slots(pinned) === 0) return null;
    const others = hosts
      .filter((h) => h.hostId !== rank0Host)
      .sort((a, b) => slots(b) - slots(a) || byId(a, b));
    order = [pinned, ...others];
  } else {
    const single = hosts
      .filter((h) => slots(h) >= workers)
      .sort((a, b) => a.free.length - b.free.length || byId(a, b))[0];
    order = single ? [single] : [...hosts].sort((a, b) => slots(b) - slots(a) || byId(a, b));
  }
  const result: WorkerPlacement[] = [];
  for (const host of order) {
    let taken = 0;
    while (taken + gpusPerWorker <= host.free.length && result.length < workers) {
      result.push({
        rank: result.length,
        hostId: host.hostId,
        gpuIndices: host.free.slice(taken, taken + gpusPerWorker),
      });
      taken += gpusPerWorker;
    }
    if (result.length === workers) return result;
  }
  return null;
}

/** Could the gang ever fit, every host empty? `totals` are the hosts' GPU counts of the type. */
export function couldEverFit(
  totals: readonly { hostId: string; total: number }[],
  request: GangRequest,
): boolean {
  let slots = 0;
  for (const { hostId, total } of totals) {
    const n = Math.floor(total / request.gpusPerWorker);
    if (request.rank0Host === hostId && n === 0) return false;
    slots += n;
  }
  if (request.rank0Host !== null && !totals.some((t) => t.hostId === request.rank0Host)) return false;
  return slots >= request.workers;
}

/**
 * The limits every workload's container gets (tenant isolation: one workload never starves a neighbour
 * on its host). A cluster asks for CPU, memory and disk; endpoint and training workers ask only for GPUs,
 * so they get a share per GPU. Limits, not reservations: the scheduler places by GPUs.
 */

/** Processes (threads included) one container may hold: a fork bomb stops here, far above real jobs. */
export const PIDS_LIMIT = 4096;

/** What a worker without its own request gets per GPU (and for a GPU-less one, as for one GPU). */
export const WORKER_SHARE_PER_GPU = { cpuCores: 8, memoryGb: 64 } as const;

export interface WorkloadLimits {
  cpus: number;
  memoryBytes: number;
  pidsLimit: number;
  diskBytes: number | null;
}

const GB = 1024 ** 3;

/** A cluster's own request (cpu_cores, memory_gb, storage_gb). */
export function requestedLimits(request: {
  cpuCores: number;
  memoryGb: number;
  storageGb: number;
}): WorkloadLimits {
  return {
    cpus: request.cpuCores,
    memoryBytes: request.memoryGb * GB,
    pidsLimit: PIDS_LIMIT,
    diskBytes: request.storageGb > 0 ? request.storageGb * GB : null,
  };
}

/** A worker's share: WORKER_SHARE_PER_GPU times its GPUs (at least one). No disk bound: no storage_gb. */
export function workerLimits(gpuCount: number): WorkloadLimits {
  const shares = Math.max(1, gpuCount);
  return {
    cpus: WORKER_SHARE_PER_GPU.cpuCores * shares,
    memoryBytes: WORKER_SHARE_PER_GPU.memoryGb * shares * GB,
    pidsLimit: PIDS_LIMIT,
    diskBytes: null,
  };
}

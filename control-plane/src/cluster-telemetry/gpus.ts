import type { Cluster } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';

/** One GPU of a cluster: its id in the API, its host index and UUID (the telemetry series). */
export interface ClusterGpu {
  /** `gpu_<n>`: n is the GPU's position in the cluster (0..gpu_count-1), as CUDA numbers it inside. */
  id: string;
  hostIndex: number;
  uuid: string | null;
}

interface InventoryDevices {
  gpus?: { devices?: { index: number; uuid: string }[] };
}

/**
 * The cluster's GPUs, mapped to UUIDs through the host's last reported inventory. A GPU the inventory
 * does not list has a null UUID (no series: its values are null).
 */
export async function clusterGpus(db: Database, cluster: Cluster): Promise<ClusterGpu[]> {
  if (!cluster.hostId || cluster.gpuIndices.length === 0) return [];
  const host = await db.prisma.host.findUnique({
    where: { id: cluster.hostId },
    select: { inventory: true },
  });
  const devices = (host?.inventory as InventoryDevices | null)?.gpus?.devices ?? [];
  return cluster.gpuIndices.map((hostIndex, n) => ({
    id: `gpu_${n}`,
    hostIndex,
    uuid: devices.find((d) => d.index === hostIndex)?.uuid ?? null,
  }));
}

/** Accepts `gpu_<n>`, `<n>` or the GPU's UUID; undefined when it names none of the cluster's GPUs. */
export function findGpu(gpus: ClusterGpu[], gpuId: string): ClusterGpu | undefined {
  const id = /^\d+$/.test(gpuId) ? `gpu_${gpuId}` : gpuId;
  return gpus.find((g) => g.id === id || (g.uuid !== null && g.uuid === gpuId));
}

import { type GpuType, gpuBoardOf } from '@anvil/shared';

/** The GPU types customers ask for (spec: Cluster.gpu_type, extended by the board catalogue in shared/). */
export { GPU_TYPES, type GpuType, gpuTypeSql } from '@anvil/shared';

/** The regions hosts are labelled with at join time (spec: Cluster.region). */
export const REGIONS = ['us-east-1', 'us-west-2', 'eu-west-1', 'ap-southeast-1'] as const;

/** The type of an inventory GPU name, or null for a GPU no customer can ask for. */
export function gpuTypeOf(name: string): GpuType | null {
  return gpuBoardOf(name)?.type ?? null;
}

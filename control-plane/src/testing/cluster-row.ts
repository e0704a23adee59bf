import type { Prisma } from '../db/generated/client.ts';

/** A `clusters` row for tests that need one without the scheduler: one H100, running, nothing placed. */
export function clusterRow(
  fields: Pick<Prisma.ClusterUncheckedCreateInput, 'id' | 'accountId' | 'ownerId' | 'name'> &
    Partial<Prisma.ClusterUncheckedCreateInput>,
): Prisma.ClusterUncheckedCreateInput {
  return {
    status: 'running',
    gpuType: 'H100',
    gpuCount: 1,
    cpuCores: 1,
    memoryGb: 1,
    storageGb: 1,
    dockerImage: 'x',
    command: [],
    ports: [],
    gpuIndices: [],
    ...fields,
  };
}

import { newId } from '@anvil/shared';
import type { Prisma } from '../db/generated/client.ts';

/** An `endpoints` row for queue and dispatcher tests that need one without the service: one H100, one worker. */
export function endpointRow(
  fields: Pick<Prisma.EndpointUncheckedCreateInput, 'accountId'> &
    Partial<Prisma.EndpointUncheckedCreateInput>,
): Prisma.EndpointUncheckedCreateInput {
  return {
    id: newId('ep'),
    ownerId: 'usr_x',
    name: 'e',
    dockerImage: 'img',
    gpuType: 'H100',
    gpuCount: 1,
    workerCount: 1,
    maxConcurrency: 1,
    timeoutSeconds: 60,
    autoScaling: {},
    ...fields,
  };
}

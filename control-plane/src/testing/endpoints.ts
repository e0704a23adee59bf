import type { EndpointWorker } from '../db/generated/client.ts';
import { call } from './accounts.ts';
import type { TestApp } from './app.ts';
import { waitFor } from './wait.ts';

/** A one-worker busybox endpoint on H100s, created by the owner through POST /v2/endpoints; answers its id. */
export async function createEndpoint(
  t: TestApp,
  name: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const created = await call(t, {
    method: 'POST',
    url: '/v2/endpoints',
    payload: {
      name,
      image: 'anvil-test/busybox:latest',
      gpuType: 'H100',
      configuration: { workerCount: 1 },
      ...extra,
    },
  });
  if (created.statusCode !== 201) throw new Error(`endpoint: ${created.body}`);
  return created.json().id;
}

/** The endpoint's first worker, once the scheduler has placed one. */
export function placedWorker(t: TestApp, endpointId: string): Promise<EndpointWorker> {
  return waitFor('a worker placed', () =>
    t.context.db.prisma.endpointWorker.findFirst({ where: { endpointId } }),
  );
}

import { randomBytes } from 'node:crypto';
import type Dockerode from 'dockerode';
import type { WorkloadSpecInput } from '../../control-plane/src/fleet/workloads/workloads.ts';
import { workloadSpecInput } from '../agent/fixtures.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import type { FleetControlPlane } from './control-plane.ts';

/** Labels every fleet test container carries, so afterAll removes exactly what one test file made. */
export function runLabel(): { key: string; value: string; filter: string } {
  const value = randomBytes(4).toString('hex');
  return { key: 'anvil.fleet-run', value, filter: `anvil.fleet-run=${value}` };
}

/** A busybox workload that sleeps (or runs `script`); labelled for cleanup. */
export function busyboxSpec(
  run: { key: string; value: string },
  overrides: Partial<WorkloadSpecInput> & { script?: string } = {},
): WorkloadSpecInput {
  const { script, ...rest } = overrides;
  return workloadSpecInput({
    image: BUSYBOX_IMAGE,
    command: script ? ['sh', '-c', script] : ['sleep', '3600'],
    labels: { 'anvil.test': '1', [run.key]: run.value },
    ...rest,
  });
}

/** Creates a workload through the control plane's own service, as the clusters area does. */
export async function createWorkload(
  cp: FleetControlPlane,
  hostId: string,
  spec: WorkloadSpecInput,
): Promise<string> {
  const view = await cp.context.fleet.workloads.create({
    hostId,
    kind: 'training',
    ownerAccountId: cp.accountId,
    spec,
  });
  return view.id;
}

/** Removes every container of this run from `docker` (anything the agents left). */
export async function removeRunContainers(docker: Dockerode, filter: string): Promise<void> {
  const list = await docker.listContainers({ all: true, filters: { label: [filter] } }).catch(() => []);
  await Promise.all(
    list.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => {}),
    ),
  );
}

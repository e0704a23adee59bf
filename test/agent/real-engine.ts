import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { pino } from 'pino';
import { systemClock } from '../../agent/src/clock.ts';
import { Reconciler, type ReconcilerOptions } from '../../agent/src/reconcile/reconciler.ts';
import { ensureBusyboxImage, TEST_HOST_IMAGES } from '../fixtures/images/busybox.ts';
import { removeTestContainers, testDocker } from '../fixtures/images/docker.ts';

/** What an agent test on the real Docker engine starts from: busybox present, a volume root of its own. */
export interface RealEngine {
  docker: Dockerode;
  volumeRoot: string;
  /** Removes the containers with these labels (`anvil.host=…`), then the volume root. */
  remove(...labels: string[]): Promise<void>;
}

export async function realEngine(docker: Dockerode = testDocker()): Promise<RealEngine> {
  await ensureBusyboxImage(docker);
  const volumeRoot = await mkdtemp(join(tmpdir(), 'anvil-volumes-'));
  return {
    docker,
    volumeRoot,
    async remove(...labels) {
      for (const label of labels) await removeTestContainers(docker, label);
      await rm(volumeRoot, { recursive: true, force: true });
    },
  };
}

/**
 * A reconciler as a test host runs it: the test images, GPUs as environment only, a silent logger,
 * and the callbacks ignored unless the test listens.
 */
export function testReconciler(
  options: Pick<ReconcilerOptions, 'runtime' | 'hostId' | 'volumeRoot'> & Partial<ReconcilerOptions>,
): Reconciler {
  return new Reconciler({
    hostImages: TEST_HOST_IMAGES,
    gpuMode: 'env-only',
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    onContainerState: () => {},
    onActualState: () => {},
    onPullProgress: () => {},
    ...options,
  });
}

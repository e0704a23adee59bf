import type { WorkloadSpec } from '@anvil/shared/protocol';

/** A minimal valid workload spec without its id (as the control plane's workload service takes it). */
export function workloadSpecInput(
  overrides: Partial<Omit<WorkloadSpec, 'workloadId'>> = {},
): Omit<WorkloadSpec, 'workloadId'> {
  return {
    image: 'anvil-test/busybox:latest',
    command: ['sleep', '3600'],
    entrypoint: null,
    env: {},
    labels: { 'anvil.test': '1' },
    gpus: [],
    cpus: null,
    memoryBytes: null,
    shmBytes: null,
    ports: [],
    volume: null,
    restartPolicy: { name: 'no', maxRetries: 0 },
    stopGraceSeconds: 1,
    ...overrides,
  };
}

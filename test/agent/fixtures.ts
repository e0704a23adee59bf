import type { Inventory, WorkloadSpec } from '@anvil/shared/protocol';

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

/** A minimal valid workload spec; tests override what they exercise. */
export function workloadSpec(workloadId: string, overrides: Partial<WorkloadSpec> = {}): WorkloadSpec {
  return { workloadId, ...workloadSpecInput(overrides) };
}

/** A small valid inventory for protocol tests that do not gather a real one. */
export function sampleInventory(): Inventory {
  return {
    host: {
      hostname: 'test-host',
      os: { platform: 'linux', distro: null, release: null, kernel: null, arch: 'x64' },
      cpu: { model: null, cores: null, threads: null },
      memoryBytes: null,
      disks: [],
      networkInterfaces: [],
    },
    gpus: {
      simulated: false,
      source: 'none',
      driverVersion: null,
      cudaVersion: null,
      devices: [],
      error: null,
    },
    docker: { version: null, apiVersion: null, runtimes: [], nvidiaRuntime: false, error: null },
  };
}

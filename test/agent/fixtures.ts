import type { Inventory, WorkloadSpec } from '@anvil/shared/protocol';
import { workloadSpecInput } from '../../control-plane/src/testing/workload-spec.ts';

export { workloadSpecInput };

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

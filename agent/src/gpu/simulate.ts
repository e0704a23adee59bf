import { createHash } from 'node:crypto';
import type { GpuDevice } from '@anvil/shared/protocol';

/**
 * Catalogue of boards a developer may declare with --simulate-gpus. Names and memory are what NVML
 * reports for the real board, so a simulated host schedules like a real one.
 */
const MODELS: Record<string, { name: string; memoryMiB: number }> = {
  H100: { name: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559 },
  H200: { name: 'NVIDIA H200', memoryMiB: 143771 },
  A100: { name: 'NVIDIA A100-SXM4-80GB', memoryMiB: 81920 },
  L40S: { name: 'NVIDIA L40S', memoryMiB: 46068 },
  A10: { name: 'NVIDIA A10', memoryMiB: 23028 },
  RTX4090: { name: 'NVIDIA GeForce RTX 4090', memoryMiB: 24564 },
};

export const SIMULATABLE_MODELS = Object.keys(MODELS);

export interface SimulatedGroup {
  count: number;
  model: string;
}

/** "2xH100" or "2xH100,1xA100" -> groups. Throws with the accepted form on anything else. */
export function parseSimulateGpus(value: string): SimulatedGroup[] {
  const groups: SimulatedGroup[] = [];
  for (const part of value.split(',').map((p) => p.trim())) {
    const match = /^(\d{1,2})x([A-Za-z0-9]+)$/.exec(part);
    const model = match?.[2]?.toUpperCase();
    const count = Number(match?.[1]);
    if (!match || !model || !(model in MODELS) || count < 1) {
      throw new Error(
        `--simulate-gpus ${JSON.stringify(value)}: expected <count>x<model>[,...] with model one of ${SIMULATABLE_MODELS.join(', ')}`,
      );
    }
    groups.push({ count, model });
  }
  return groups;
}

/** A UUID-shaped id derived from the host's seed, stable across agent restarts, unique per host. */
function simulatedUuid(seed: string, index: number): string {
  const h = createHash('sha256').update(`${seed}/${index}`).digest('hex');
  return `GPU-${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

export function simulatedDevices(groups: SimulatedGroup[], seed: string): GpuDevice[] {
  const devices: GpuDevice[] = [];
  for (const group of groups) {
    const model = MODELS[group.model];
    if (!model) continue;
    for (let i = 0; i < group.count; i++) {
      const index = devices.length;
      // No PCI address: there is no device, and inventing one would mislead an operator.
      devices.push({
        index,
        uuid: simulatedUuid(seed, index),
        name: model.name,
        memoryTotalBytes: model.memoryMiB * 1024 * 1024,
        pciBusId: null,
      });
    }
  }
  return devices;
}

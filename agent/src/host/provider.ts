import type { HostInventory, HostMetrics } from '@anvil/shared/protocol';
import { hostInventory } from './inventory.ts';
import { createLinuxHostSampler } from './metrics.ts';
import { portableHostMetrics } from './metrics-portable.ts';

/** The machine itself, injected into the agent so tests can stand in a fixed host. */
export interface HostProvider {
  inventory(): Promise<HostInventory>;
  sample(): Promise<HostMetrics>;
}

export const systemHost: HostProvider = {
  inventory: hostInventory,
  sample: process.platform === 'linux' ? createLinuxHostSampler() : portableHostMetrics,
};

import type { HostInventory, HostMetrics } from '@anvil/shared/protocol';
import { hostInventory } from './inventory.ts';
import { hostMetrics } from './metrics.ts';

/** The machine itself, injected into the agent so tests can stand in a fixed host. */
export interface HostProvider {
  inventory(): Promise<HostInventory>;
  sample(): Promise<HostMetrics>;
}

export const systemHost: HostProvider = { inventory: hostInventory, sample: hostMetrics };

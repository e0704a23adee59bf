import { HostInventory, HostMetrics } from '@anvil/shared/protocol';
import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import { isHostDisk, isHostInterface, known } from './filters.ts';
import { hostInventory } from './inventory.ts';
import { hostMetrics } from './metrics.ts';

describe('host inventory and metrics from systeminformation', () => {
  it('describes this machine in the protocol shape', async () => {
    const inventory = await hostInventory();
    expect(Value.Check(HostInventory, inventory)).toBe(true);
    expect(inventory.cpu.threads).toBeGreaterThan(0);
    expect(inventory.memoryBytes).toBeGreaterThan(0);
    expect(inventory.disks.some((d) => d.mount === '/')).toBe(true);
    expect(inventory.networkInterfaces.some((n) => n.name === 'lo')).toBe(true);
  });

  it('samples cpu, load, memory, disks, disk io and network', async () => {
    const sample = await hostMetrics();
    expect(Value.Check(HostMetrics, sample)).toBe(true);
    expect(sample.memoryUsedBytes).toBeGreaterThan(0);
    expect(sample.load1).toBeGreaterThanOrEqual(0);
    expect(sample.network.find((n) => n.interface === 'lo')?.rxBytes).toBeGreaterThanOrEqual(0);
  });

  it('leaves out container plumbing and maps unknowns to null', () => {
    expect(isHostInterface('veth12ab')).toBe(false);
    expect(isHostInterface('eth0')).toBe(true);
    expect(isHostDisk('overlay', '/var/lib/docker/overlay2/x/merged')).toBe(false);
    expect(isHostDisk('ext4', '/')).toBe(true);
    expect(known(-1)).toBeNull();
    expect(known('')).toBeNull();
    expect(known(0)).toBe(0);
  });
});

import { describe, expect, it } from 'vitest';
import type { Host } from '../types.ts';
import { filterHosts, freeGpus, hostHealth, sortHosts } from './fleet-filters.ts';

/** A host as the admin API lists it, as far as the fleet's filters read it. */
function host(
  name: string,
  options: {
    status?: Host['status'];
    region?: string | null;
    models?: string[];
    gpus?: number;
    allocated?: number;
    health?: (string | null)[];
  } = {},
): Host {
  return {
    id: `host_${name}`,
    name,
    status: options.status ?? 'ready',
    region: options.region ?? null,
    lastHeartbeatAt: null,
    gpus: { count: options.gpus ?? 1, models: options.models ?? ['NVIDIA H100 80GB HBM3'] },
    workloads: { total: 0, running: 0, gpusAllocated: options.allocated ?? 0 },
    // The admin API's per-GPU kept health (issue 17): null where a GPU reported none.
    gpuDevices: (options.health ?? []).map((state, index) => ({
      index,
      health: state === null ? null : { state, reasons: [], since: '2026-11-27T00:00:00.000Z' },
    })),
  } as unknown as Host;
}

const any = { status: '', gpuType: '', region: '', health: '', minFree: 0 };

describe('fleet filters', () => {
  it("takes a host's health from its worst GPU, unknown where none reported", () => {
    expect(hostHealth(host('a', { health: ['healthy', 'failed', 'degraded'] }))).toBe('failed');
    expect(hostHealth(host('b', { health: ['healthy', null, 'degraded'] }))).toBe('degraded');
    expect(hostHealth(host('c', { health: ['healthy'] }))).toBe('healthy');
    expect(hostHealth(host('d', { health: [null] }))).toBe('unknown');
    expect(hostHealth(host('e'))).toBe('unknown');
  });

  it('filters by health, status, GPU type, region and free GPUs, all at once', () => {
    const hosts = [
      host('a', { health: ['failed', 'healthy'], gpus: 2, region: 'eu' }),
      host('b', { health: ['healthy'], status: 'cordoned', models: ['NVIDIA A100 80GB'] }),
      host('c', { health: ['degraded'], gpus: 4, allocated: 1, region: 'eu' }),
    ];
    const names = (filter: Partial<typeof any>) =>
      filterHosts(hosts, { ...any, ...filter }).map((h) => h.name);
    expect(names({ health: 'failed' })).toEqual(['a']);
    expect(names({ health: 'healthy' })).toEqual(['b']);
    expect(names({ status: 'cordoned' })).toEqual(['b']);
    expect(names({ gpuType: 'NVIDIA A100 80GB' })).toEqual(['b']);
    expect(names({ region: '-' })).toEqual(['b']);
    expect(names({ region: 'eu', minFree: 3 })).toEqual(['c']);
    expect(freeGpus(hosts[2]!)).toBe(3);
  });

  it('sorts by health, worst first when descending, ties by name', () => {
    const hosts = [
      host('b', { health: ['healthy'] }),
      host('a', { health: ['failed'] }),
      host('c', { health: ['healthy'] }),
      host('d'),
    ];
    const names = (descending: boolean) => sortHosts(hosts, { key: 'health', descending }).map((h) => h.name);
    expect(names(true)).toEqual(['a', 'b', 'c', 'd']);
    expect(names(false)).toEqual(['d', 'b', 'c', 'a']);
  });
});

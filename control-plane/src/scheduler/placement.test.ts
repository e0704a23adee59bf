import { describe, expect, it } from 'vitest';
import { gpuTypeOf } from './gpu-types.ts';
import {
  availableGpuTypes,
  couldEverFit,
  type HostCandidate,
  type PlacementRequest,
  place,
} from './placement.ts';

function host(id: string, overrides: Partial<HostCandidate> = {}): HostCandidate {
  return {
    hostId: id,
    region: 'us-east-1',
    schedulable: true,
    gpus: { H100: [0, 1, 2, 3].map((index) => ({ index, uuid: `GPU-${id}-${index}` })) },
    takenGpuIndices: [],
    cpuThreads: 64,
    memoryGb: 512,
    diskGb: 2000,
    used: { cpuCores: 0, memoryGb: 0, storageGb: 0 },
    ...overrides,
  };
}

const request = (overrides: Partial<PlacementRequest> = {}): PlacementRequest => ({
  gpuType: 'H100',
  gpuCount: 1,
  cpuCores: 4,
  memoryGb: 16,
  storageGb: 50,
  region: null,
  hostId: null,
  ...overrides,
});

describe('GPU type mapping', () => {
  it.each([
    ['NVIDIA H100 80GB HBM3', 'H100'],
    ['NVIDIA H100 PCIe', 'H100_PCIE'],
    ['NVIDIA A100-SXM4-80GB', 'A100'],
    ['NVIDIA A100-SXM4-40GB', 'A100_40GB'],
    ['NVIDIA GeForce RTX 4090', 'RTX4090'],
    ['Tesla V100-SXM2-16GB', 'V100'],
    ['Tesla T4', 'T4'],
    ['NVIDIA L40S', 'L40S'],
    ['NVIDIA L40', null],
    ['NVIDIA RTX A6000', null],
  ])('%s → %s', (name, type) => {
    expect(gpuTypeOf(name)).toBe(type);
  });
});

describe('placement', () => {
  it('gives concrete free GPU indices, lowest first', () => {
    expect(place([host('a', { takenGpuIndices: [0, 2] })], request({ gpuCount: 2 }))).toEqual({
      hostId: 'a',
      gpus: [
        { index: 1, uuid: 'GPU-a-1' },
        { index: 3, uuid: 'GPU-a-3' },
      ],
    });
  });

  it('best fit: the host left with the fewest free GPUs of the type', () => {
    const hosts = [
      host('empty'),
      host('half', { takenGpuIndices: [0, 1] }),
      host('full', { takenGpuIndices: [0, 1, 2, 3] }),
    ];
    expect(place(hosts, request())?.hostId).toBe('half');
    expect(place(hosts, request({ gpuCount: 3 }))?.hostId).toBe('empty');
  });

  it('matches the type, the region and the pinned host', () => {
    const hosts = [
      host('a100', { gpus: { A100: [{ index: 0, uuid: 'x' }] } }),
      host('west', { region: 'us-west-2' }),
      host('east'),
    ];
    expect(place(hosts, request({ gpuType: 'A100' }))?.hostId).toBe('a100');
    expect(place(hosts, request({ region: 'us-west-2' }))?.hostId).toBe('west');
    expect(place(hosts, request({ hostId: 'east' }))?.hostId).toBe('east');
    expect(place(hosts, request({ gpuType: 'T4' }))).toBeNull();
  });

  it('excludes unschedulable hosts (cordoned, unreachable) but counts them as capacity that could fit', () => {
    const cordoned = host('c', { schedulable: false });
    expect(place([cordoned], request())).toBeNull();
    expect(couldEverFit(cordoned, request())).toBe(true);
  });

  it('respects CPU, memory and disk, with unknown totals not constraining', () => {
    const busy = host('b', { used: { cpuCores: 62, memoryGb: 0, storageGb: 0 } });
    expect(place([busy], request({ cpuCores: 4 }))).toBeNull();
    expect(couldEverFit(busy, request({ cpuCores: 4 }))).toBe(true);
    expect(couldEverFit(host('small', { memoryGb: 8 }), request({ memoryGb: 16 }))).toBe(false);
    expect(
      place([host('u', { cpuThreads: null, memoryGb: null, diskGb: null })], request({ cpuCores: 1000 }))
        ?.hostId,
    ).toBe('u');
  });

  it('on a reserved host, gives others only what the reservation does not need', () => {
    const reservation = {
      clusterId: 'cluster_big',
      gpuType: 'H100' as const,
      gpuCount: 2,
      cpuCores: 32,
      memoryGb: 0,
      storageGb: 0,
    };
    const reserved = host('r', { takenGpuIndices: [0], reservation });
    // 3 free, 2 reserved: one may go, two may not.
    expect(place([reserved], request())?.gpus.map((g) => g.index)).toEqual([1]);
    expect(place([reserved], request({ gpuCount: 2 }))).toBeNull();
    // The reserving cluster itself is not held back by its own reservation.
    expect(place([reserved], request({ gpuCount: 3 }), 'cluster_big')?.gpus).toHaveLength(3);
    // Its CPU is held too: 64 threads, 32 reserved.
    expect(place([reserved], request({ cpuCores: 33 }))).toBeNull();
    // Another type's GPUs on the same host are not reserved.
    const mixed = host('m', {
      gpus: { H100: [{ index: 0, uuid: 'h' }], A100: [{ index: 1, uuid: 'a' }] },
      reservation: { ...reservation, gpuCount: 1, cpuCores: 0 },
    });
    expect(place([mixed], request({ gpuType: 'A100' }))?.hostId).toBe('m');
    expect(place([mixed], request())).toBeNull();
  });

  it('lists the GPU types there are, within a region', () => {
    const hosts = [host('a'), host('b', { region: 'eu-west-1', gpus: { T4: [{ index: 0, uuid: 't' }] } })];
    expect(availableGpuTypes(hosts, null)).toEqual(['H100', 'T4']);
    expect(availableGpuTypes(hosts, 'eu-west-1')).toEqual(['T4']);
  });
});

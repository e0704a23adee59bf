import { describe, expect, it } from 'vitest';
import type { PlacedWorker } from './launcher.ts';
import { chooseVictims } from './preemption.ts';

const worker = (hostId: string, indices: number[]): PlacedWorker => ({
  rank: 0,
  workloadId: `w-${hostId}-${indices.join('')}`,
  hostId,
  gpus: indices.map((index) => ({ index, uuid: `GPU-${index}` })),
  staleContainerId: null,
});

describe('preemption victims', () => {
  const free = [
    { hostId: 'a', free: [3] },
    { hostId: 'b', free: [] },
  ];
  const candidates = [
    { id: 'newest', placement: [worker('b', [0])] },
    { id: 'older', placement: [worker('a', [1, 2])] },
  ];

  it('takes candidates in the given order until the waiting gang fits, and no more', () => {
    expect(chooseVictims({ workers: 1, gpusPerWorker: 1, rank0Host: null }, free, candidates)).toEqual([]);
    expect(chooseVictims({ workers: 1, gpusPerWorker: 2, rank0Host: null }, free, candidates)).toEqual([
      'newest',
      'older',
    ]);
    expect(chooseVictims({ workers: 2, gpusPerWorker: 1, rank0Host: null }, free, candidates)).toEqual([
      'newest',
    ]);
  });

  it('preempts nothing when even every candidate would not make room', () => {
    expect(chooseVictims({ workers: 1, gpusPerWorker: 4, rank0Host: null }, free, candidates)).toBeNull();
    expect(chooseVictims({ workers: 1, gpusPerWorker: 1, rank0Host: 'c' }, free, candidates)).toBeNull();
  });
});

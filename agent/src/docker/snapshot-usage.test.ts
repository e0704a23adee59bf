import type Dockerode from 'dockerode';
import { describe, expect, it } from 'vitest';
import { snapshotUsageOf } from './snapshot-usage.ts';

const image = (over: Partial<Dockerode.ImageInfo>): Dockerode.ImageInfo =>
  ({
    Id: 'sha256:x',
    ParentId: '',
    RepoTags: [],
    Labels: {},
    Size: 0,
    Created: 0,
    ...over,
  }) as Dockerode.ImageInfo;

describe('snapshot images for storage metering', () => {
  it('lists snapshot images only, each with what it adds to its parent', () => {
    const usage = snapshotUsageOf([
      image({ Id: 'sha256:base', RepoTags: ['pytorch:2'], Size: 5_000 }),
      image({
        Id: 'sha256:snap1',
        ParentId: 'sha256:base',
        RepoTags: ['anvil-snapshots/acc_a/cluster_a:stop-1'],
        Labels: { 'anvil.workload': 'cluster_a' },
        Size: 5_300,
      }),
      // A snapshot of a cluster made from a snapshot: only its own layer.
      image({
        Id: 'sha256:snap2',
        ParentId: 'sha256:snap1',
        RepoTags: ['anvil-snapshots/acc_a/cluster_b:final'],
        Labels: { 'anvil.workload': 'cluster_b' },
        Size: 5_350,
      }),
      // The parent is gone from the listing: own bytes unknown rather than guessed.
      image({
        Id: 'sha256:orphan',
        ParentId: 'sha256:gone',
        RepoTags: ['anvil-snapshots/acc_a/c:x'],
        Size: 10,
      }),
    ]);
    expect(usage).toEqual([
      {
        imageId: 'sha256:snap1',
        repository: 'anvil-snapshots/acc_a/cluster_a',
        workloadId: 'cluster_a',
        sizeBytes: 5_300,
        ownBytes: 300,
      },
      {
        imageId: 'sha256:snap2',
        repository: 'anvil-snapshots/acc_a/cluster_b',
        workloadId: 'cluster_b',
        sizeBytes: 5_350,
        ownBytes: 50,
      },
      {
        imageId: 'sha256:orphan',
        repository: 'anvil-snapshots/acc_a/c',
        workloadId: null,
        sizeBytes: 10,
        ownBytes: null,
      },
    ]);
  });
});

import { describe, expect, it } from 'vitest';
import { removesSnapshots, snapshotRepository, snapshotTag } from './snapshots.ts';

describe('cluster snapshots', () => {
  it('removes earlier snapshots when either flag asks for it; keeps them by default', () => {
    expect(removesSnapshots({ delete_snapshots: false, preserve_snapshots: true })).toBe(false);
    // delete_snapshots wins over the default preserve_snapshots it is always sent with.
    expect(removesSnapshots({ delete_snapshots: true, preserve_snapshots: true })).toBe(true);
    expect(removesSnapshots({ delete_snapshots: false, preserve_snapshots: false })).toBe(true);
    expect(removesSnapshots({ delete_snapshots: true, preserve_snapshots: false })).toBe(true);
  });

  it('names snapshots in one repository per cluster, with a Docker-safe tag', () => {
    expect(snapshotRepository('acc_X1', 'cluster_AbC1')).toBe('anvil-snapshots/acc_x1/cluster_abc1');
    expect(snapshotTag('before restart/1', 'stop', '2026-11-25T01:02:03.456Z')).toBe('before-restart-1');
    expect(snapshotTag('..hidden', 'stop', '2026-11-25T01:02:03.456Z')).toBe('hidden');
    expect(snapshotTag(null, 'delete', '2026-11-25T01:02:03.456Z')).toBe('delete-20261125010203');
    expect(snapshotTag('...', 'stop', '2026-11-25T01:02:03.456Z')).toBe('stop-20261125010203');
  });
});

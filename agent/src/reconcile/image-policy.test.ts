import { describe, expect, it } from 'vitest';
import { imageSource, snapshotRefusal } from './image-policy.ts';

describe('image policy', () => {
  it('pulls every image but the listed host images and snapshots', () => {
    const host = ['anvil-test/*', 'registry.local/base:1', 'busybox'];
    expect(imageSource('anvil-test/busybox:latest', host)).toEqual({ kind: 'host' });
    expect(imageSource('registry.local/base:1', host)).toEqual({ kind: 'host' });
    expect(imageSource('busybox', host)).toEqual({ kind: 'host' });
    expect(imageSource('busybox:latest', host)).toEqual({ kind: 'host' });
    expect(imageSource('registry.local/base:2', host)).toEqual({ kind: 'registry' });
    expect(imageSource('anvil-testing/x', host)).toEqual({ kind: 'registry' });
    expect(imageSource('anvil-test/busybox', [])).toEqual({ kind: 'registry' });
    // A snapshot is never a host image, whatever the operator listed.
    expect(imageSource('anvil-snapshots/acc_a/cluster_1:s', ['*'])).toEqual({
      kind: 'snapshot',
      accountId: 'acc_a',
    });
  });

  it('runs a snapshot only for the account its name and its label both give', () => {
    const image = 'anvil-snapshots/acc_a/cluster_1:s';
    const source = { accountId: 'acc_a' };
    expect(snapshotRefusal(image, source, { 'anvil.account': 'acc_a' }, 'acc_a')).toBeNull();
    expect(snapshotRefusal(image, source, { 'anvil.account': 'acc_a' }, 'acc_b')).toMatch(/another account/);
    expect(snapshotRefusal(image, source, { 'anvil.account': 'acc_b' }, 'acc_b')).toMatch(/another account/);
    expect(snapshotRefusal(image, source, {}, 'acc_a')).toMatch(/another account/);
    expect(snapshotRefusal(image, source, { 'anvil.account': 'acc_a' }, null)).toMatch(/another account/);
    expect(snapshotRefusal(image, source, null, 'acc_a')).toMatch(/not on this host/);
  });
});

import { describe, expect, it } from 'vitest';
import { registryAuthFor, registryHostOf } from './registry-auth.ts';
import { requireOwnImage, snapshotRepository } from './snapshot-images.ts';

describe('registry credentials for a pull', () => {
  it('reads the registry host of an image as Docker does', () => {
    expect(registryHostOf('busybox')).toBe('docker.io');
    expect(registryHostOf('library/busybox:1')).toBe('docker.io');
    expect(registryHostOf('index.docker.io/acme/app')).toBe('docker.io');
    expect(registryHostOf('ghcr.io/acme/app:1')).toBe('ghcr.io');
    expect(registryHostOf('127.0.0.1:5000/acme/app')).toBe('127.0.0.1:5000');
    expect(registryHostOf('localhost/app')).toBe('localhost');
  });

  it('gives the matching registry setting with a token, or nothing', () => {
    const registries = [
      { url: 'https://GHCR.io/acme', username: 'bot', access_token: 'ghp_x' },
      { url: '127.0.0.1:5000', username: 'u', access_token: null },
      { url: 'docker.io', username: 'hub', access_token: 'dckr_y' },
    ];
    expect(registryAuthFor('ghcr.io/acme/app:1', registries)).toEqual({
      serverAddress: 'ghcr.io',
      username: 'bot',
      password: 'ghp_x',
    });
    expect(registryAuthFor('127.0.0.1:5000/app', registries)).toBeNull();
    expect(registryAuthFor('acme/app', registries)).toEqual({
      serverAddress: 'https://index.docker.io/v1/',
      username: 'hub',
      password: 'dckr_y',
    });
    expect(registryAuthFor('quay.io/acme/app', registries)).toBeNull();
  });

  it("names snapshots per account and refuses another account's", () => {
    expect(snapshotRepository('acc_A', 'cluster_B')).toBe('anvil-snapshots/acc_a/cluster_b');
    expect(() => requireOwnImage('acc_a', 'anvil-snapshots/acc_a/cluster_b:s')).not.toThrow();
    expect(() => requireOwnImage('acc_a', 'busybox')).not.toThrow();
    expect(() => requireOwnImage('acc_b', 'anvil-snapshots/acc_a/cluster_b:s')).toThrow(
      /snapshot of another account/,
    );
  });
});

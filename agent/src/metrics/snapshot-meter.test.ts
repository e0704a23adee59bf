import type { SnapshotImageUsage } from '@anvil/shared/protocol';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../clock.ts';
import type { ContainerRuntime } from '../docker/runtime.ts';
import type { GpuProvider } from '../gpu/provider.ts';
import type { HostProvider } from '../host/provider.ts';
import { MetricsSampler } from './sampler.ts';
import { SnapshotMeter } from './snapshot-meter.ts';

const image: SnapshotImageUsage = {
  imageId: 'sha256:a',
  repository: 'anvil-snapshots/acc_a/cluster_a',
  workloadId: 'cluster_a',
  sizeBytes: 10,
  ownBytes: 4,
};

describe('snapshot listings in the metric samples', () => {
  it('carries a listing once per interval, retries a failed one at the next sample', async () => {
    let now = 0;
    const clock: Clock = { now: () => now, setTimeout: () => 0, clearTimeout: () => {} };
    let fail = true;
    let listings = 0;
    const meter = new SnapshotMeter({
      clock,
      everyMs: 60_000,
      list: async () => {
        listings += 1;
        if (fail) throw new Error('engine busy');
        return [image];
      },
    });
    const sampler = new MetricsSampler({
      host: { sample: async () => null } as unknown as HostProvider,
      gpu: { sample: async () => [] } as unknown as GpuProvider,
      runtime: {} as ContainerRuntime,
      running: () => [],
      clock,
      logger: pino({ level: 'silent' }),
      maxSamples: 10,
      snapshots: meter,
    });
    expect((await sampler.sample()).snapshots).toBeUndefined();
    fail = false;
    now += 15_000;
    expect((await sampler.sample()).snapshots).toEqual([image]);
    now += 15_000;
    expect((await sampler.sample()).snapshots).toBeUndefined();
    now += 60_000;
    expect((await sampler.sample()).snapshots).toEqual([image]);
    expect(listings).toBe(3);
  });
});

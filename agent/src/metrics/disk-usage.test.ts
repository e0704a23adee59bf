import { randomBytes } from 'node:crypto';
import { link, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { type RealEngine, realEngine, testReconciler } from '../../../test/agent/real-engine.ts';
import { dockerOrFail, testDocker } from '../../../test/fixtures/images/docker.ts';
import { systemClock } from '../clock.ts';
import { volumeDir } from '../docker/container-config.ts';
import { createContainerRuntime } from '../docker/runtime.ts';
import { detectStorageQuota, parseMounts, storageQuotaOf } from '../docker/storage-quota.ts';
import { DiskMeter, directoryBytes, overQuotaReason } from './disk-usage.ts';

const MB = 1024 * 1024;

describe('directoryBytes', () => {
  it('counts allocated blocks once per file, hard links included, and 0 for a missing directory', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-du-'));
    try {
      await mkdir(join(dir, 'sub'));
      await writeFile(join(dir, 'sub', 'a'), randomBytes(MB));
      await link(join(dir, 'sub', 'a'), join(dir, 'a-again'));
      const bytes = await directoryBytes(dir);
      expect(bytes).toBeGreaterThanOrEqual(MB);
      expect(bytes).toBeLessThan(MB + 64 * 1024);
      expect(await directoryBytes(join(dir, 'absent'))).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const withDocker = dockerOrFail('agent/src/metrics/disk-usage.test.ts');

describe('storage quota detection', () => {
  const mounts = parseMounts(
    'overlay / overlay rw 0 0\n/dev/sdb1 /var/lib/docker xfs rw,relatime,prjquota 0 0\n/dev/sdc1 /data ext4 rw 0 0\n',
  );
  it('enforces only overlay2 over xfs mounted with project quotas', () => {
    const xfs = {
      Driver: 'overlay2',
      DockerRootDir: '/var/lib/docker',
      DriverStatus: [['Backing Filesystem', 'xfs']] as [string, string][],
    };
    expect(storageQuotaOf(xfs, mounts)).toEqual({ enforced: true, reason: null });
    expect(storageQuotaOf({ ...xfs, DockerRootDir: '/data/docker' }, mounts).reason).toMatch(
      /without pquota/,
    );
    expect(
      storageQuotaOf({ ...xfs, DriverStatus: [['Backing Filesystem', 'extfs']] }, mounts).reason,
    ).toMatch(/overlay2 on extfs/);
    expect(storageQuotaOf({ Driver: 'vfs' }, mounts).reason).toMatch(/storage driver vfs/);
  });

  it.skipIf(!withDocker)(
    "says this machine's engine cannot bound writable layers (overlay2 on ext4)",
    async () => {
      const docker = testDocker();
      const info = await docker.info();
      const state = await detectStorageQuota(docker);
      if (info.Driver === 'overlay2' && !String(info.DriverStatus).includes('xfs')) {
        expect(state.enforced).toBe(false);
        expect(state.reason).toMatch(/overlay2 on/);
      }
    },
  );
});

describe.skipIf(!withDocker)('disk measure against the real Docker engine', () => {
  const run = randomBytes(4).toString('hex');
  const hostId = `host_du_${run}`;
  let engine: RealEngine;

  beforeAll(async () => {
    engine = await realEngine();
  });

  afterAll(async () => {
    await engine?.remove(`anvil.host=${hostId}`);
  });

  it('measures the writable layer plus the volume, and reports a workload over its bound', {
    timeout: 120_000,
  }, async () => {
    const { docker, volumeRoot } = engine;
    const runtime = createContainerRuntime(docker);
    const layerBytes = runtime.layerBytes!.bind(runtime);
    const meter = new DiskMeter({
      layerBytes,
      clock: systemClock,
      logger: pino({ level: 'silent' }),
      everyMs: 0,
    });
    const reconciler = testReconciler({ runtime, hostId, volumeRoot, diskUsage: (id) => meter.usage(id) });
    const id = `du-${run}`;
    // 2 MB into the writable layer, 3 MB into the volume, then wait; the bound is 4 MB.
    const spec = workloadSpec(id, {
      command: [
        'sh',
        '-c',
        'head -c 2097152 /dev/urandom > /layer.bin && head -c 3145728 /dev/urandom > /workspace/v.bin && touch /workspace/done && sleep 3600',
      ],
      volume: { containerPath: '/workspace' },
      diskBytes: 4 * MB,
    });
    reconciler.setDesired(1, [spec]);
    await reconciler.idle();
    const containerId = reconciler.running().find((r) => r.workloadId === id)?.containerId;
    expect(containerId).toBeTruthy();
    const dir = volumeDir(volumeRoot, id);
    // The container has written both files once a measure counts them.
    await vi.waitFor(
      async () => {
        await meter.measure([{ workloadId: id, containerId: containerId!, volumeDir: dir }]);
        expect(meter.usage(id)?.volumeBytes ?? 0).toBeGreaterThanOrEqual(3 * MB);
        expect(meter.usage(id)?.layerBytes ?? 0).toBeGreaterThanOrEqual(2 * MB);
      },
      { timeout: 120_000, interval: 200 },
    );
    const usage = meter.usage(id)!;
    expect(usage.layerBytes).toBeGreaterThanOrEqual(2 * MB);
    expect(usage.volumeBytes).toBeGreaterThanOrEqual(3 * MB);
    expect(usage.usedBytes).toBe(usage.layerBytes! + usage.volumeBytes!);
    reconciler.trigger();
    await reconciler.idle();
    const status = reconciler.report().workloads[0]!;
    expect(status.phase).toBe('running');
    expect(status.diskUsedBytes).toBe(usage.usedBytes);
    expect(status.diskLimitBytes).toBe(4 * MB);
    expect(status.error).toMatch(/^disk over quota: 5\.\d MB used of 4\.0 MB \(storage_gb/);
    expect(overQuotaReason(usage, 1024 ** 3)).toBeNull();
    reconciler.setDesired(2, []);
    await reconciler.idle();
    reconciler.stop();
  });
});

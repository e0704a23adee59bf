import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContainerMetrics } from '@anvil/shared/protocol';
import { Value } from '@sinclair/typebox/value';
import type Dockerode from 'dockerode';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cpuTicksAdvanced } from '../../../test/agent/cpu-ticks.ts';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { ensureBusyboxImage } from '../../../test/fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../../../test/fixtures/images/docker.ts';
import { type ContainerRuntime, createContainerRuntime } from '../docker/runtime.ts';
import type { RunningContainer } from '../reconcile/reconciler.ts';
import { ContainerStatsReader, dockerIsLocal } from './container-reader.ts';

const run = randomBytes(4).toString('hex');
const hostId = `host_stats_${run}`;
const logger = pino({ level: 'silent' });

/** The runtime, counting the Docker requests the reader makes. */
function counting(runtime: ContainerRuntime) {
  const calls = { stats: 0, inspect: 0 };
  const counted: ContainerRuntime = {
    ...runtime,
    stats: (id) => {
      calls.stats += 1;
      return runtime.stats(id);
    },
    inspect: (id) => {
      calls.inspect += 1;
      return runtime.inspect(id);
    },
  };
  return { counted, calls };
}

const byId = (metrics: ContainerMetrics[], id: string) => metrics.find((m) => m.containerId === id)!;

it('reads cgroups only for a Docker engine on this machine', () => {
  expect(dockerIsLocal({})).toBe(true);
  expect(dockerIsLocal({ DOCKER_HOST: 'unix:///run/user/1000/docker.sock' })).toBe(true);
  expect(dockerIsLocal({ DOCKER_HOST: 'tcp://10.0.0.5:2376' })).toBe(false);
  expect(dockerIsLocal({ DOCKER_HOST: 'ssh://gpu-7' })).toBe(false);
});

describe.skipIf(
  process.platform !== 'linux' ||
    !dockerOrFail('agent/src/metrics/container-reader.test.ts') ||
    !dockerIsLocal(process.env),
)('container metrics from cgroup files, against the real Docker engine', () => {
  let docker: Dockerode;
  let runtime: ContainerRuntime;
  let volumeRoot: string;
  let running: RunningContainer[];

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
    volumeRoot = await mkdtemp(join(tmpdir(), 'anvil-stats-volumes-'));
    runtime = createContainerRuntime(docker);
    const context = { hostId, volumeRoot, gpuMode: 'env-only' as const };
    running = [];
    for (const [name, memoryBytes] of [
      ['limited', 256 * 1024 * 1024],
      ['unlimited', null],
    ] as const) {
      const spec = workloadSpec(`stats-${run}-${name}`, {
        // Some page cache (the file), some anonymous memory and CPU, then idle.
        command: [
          'sh',
          '-c',
          'dd if=/dev/zero of=/tmp/f bs=1M count=4 2>/dev/null; touch /tmp/done; sleep 3600',
        ],
        memoryBytes,
      });
      const id = await runtime.create(spec, context);
      await runtime.start(id);
      running.push({ containerId: id, workloadId: spec.workloadId });
    }
    // dd finished (its marker is there), so the counters stand still while the two sources are compared.
    for (const { containerId } of running) {
      await vi.waitFor(() => docker.getContainer(containerId).infoArchive({ path: '/tmp/done' }), {
        timeout: 30_000,
        interval: 50,
      });
    }
  });

  afterAll(async () => {
    await removeTestContainers(docker, `anvil.host=${hostId}`);
    await rm(volumeRoot, { recursive: true, force: true });
  });

  it('gives what Docker stats gives, without asking Docker for stats', async () => {
    const { counted, calls } = counting(runtime);
    const direct = new ContainerStatsReader({ runtime: counted, logger, procRoot: '/proc' });
    const viaDocker = new ContainerStatsReader({ runtime, logger, procRoot: null });
    await direct.read(running);
    await viaDocker.read(running);
    await cpuTicksAdvanced();
    const [fromCgroups, fromDocker] = [await direct.read(running), await viaDocker.read(running)];

    expect(calls).toEqual({ stats: 0, inspect: 2 });
    expect(fromCgroups).toHaveLength(2);
    for (const { containerId } of running) {
      const c = byId(fromCgroups, containerId);
      const d = byId(fromDocker, containerId);
      expect(Value.Check(ContainerMetrics, c)).toBe(true);
      expect(c.cpuPercent).toBeGreaterThanOrEqual(0);
      expect(d.cpuPercent).toBeGreaterThanOrEqual(0);
      // An idle container: its counters stand still between the two reads.
      expect(Math.abs(c.cpuTotalNs! - d.cpuTotalNs!)).toBeLessThan(20_000_000);
      expect(Math.abs(c.memoryUsedBytes! - d.memoryUsedBytes!)).toBeLessThan(256 * 1024);
      expect(c.memoryLimitBytes).toBe(d.memoryLimitBytes);
      expect(c.networkRxBytes).toBeGreaterThanOrEqual(0);
      expect(Math.abs(c.networkRxBytes! - d.networkRxBytes!)).toBeLessThan(4096);
      expect(c.networkTxBytes).toBe(d.networkTxBytes);
      expect(c.blockReadBytes).toBe(d.blockReadBytes);
      expect(c.blockWriteBytes).toBe(d.blockWriteBytes);
    }
    expect(byId(fromCgroups, running[0]!.containerId).memoryLimitBytes).toBe(256 * 1024 * 1024);
  });

  it('follows a restarted container to its new process', async () => {
    const { counted, calls } = counting(runtime);
    const reader = new ContainerStatsReader({ runtime: counted, logger, procRoot: '/proc' });
    const target = [running[1]!];
    const before = await reader.read(target);
    expect(before).toHaveLength(1);
    await docker.getContainer(target[0]!.containerId).restart({ t: 0 });
    const after = await reader.read(target);
    expect(after).toHaveLength(1);
    // The old process is gone: one more inspect found the new one, still no stats request.
    expect(calls).toEqual({ stats: 0, inspect: 2 });
    // Counters of the new cgroup, which Docker (asked after) reports no lower.
    const stats = await runtime.stats(target[0]!.containerId);
    expect(after[0]!.cpuTotalNs!).toBeLessThanOrEqual(stats!.cpu_stats.cpu_usage.total_usage);
  });

  it("asks Docker when the container's processes are not visible here, and remembers", async () => {
    // A procfs with the host's files but none of the containers' processes, as with Docker in a VM.
    const proc = await mkdtemp(join(tmpdir(), 'anvil-stats-proc-'));
    try {
      await mkdir(join(proc, 'self'));
      // procfs files report size 0, which copyFile would copy: read and write them instead.
      for (const file of ['stat', 'meminfo', 'self/mountinfo'])
        await writeFile(join(proc, file), await readFile(join('/proc', file)));
      const { counted, calls } = counting(runtime);
      const reader = new ContainerStatsReader({ runtime: counted, logger, procRoot: proc });
      expect(await reader.read(running)).toHaveLength(2);
      expect(await reader.read(running)).toHaveLength(2);
      expect(calls).toEqual({ stats: 4, inspect: 2 });
    } finally {
      await rm(proc, { recursive: true, force: true });
    }
  });
});

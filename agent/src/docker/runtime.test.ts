import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { type RealEngine, realEngine } from '../../../test/agent/real-engine.ts';
import { dockerOrFail } from '../../../test/fixtures/images/docker.ts';
import { ImageMissingError } from './errors.ts';
import { createContainerRuntime } from './runtime.ts';

const run = randomBytes(4).toString('hex');
const hostId = `host_rt_${run}`;
const wid = (name: string) => `rt-${run}-${name}`;

/** Polls `fn` until it returns a value (not null, undefined or false). */
function waitFor<T>(fn: () => Promise<T | null | undefined | false>, timeoutMs = 15_000): Promise<T> {
  return vi.waitFor(
    async () => {
      const value = await fn();
      if (!value) throw new Error('not yet');
      return value;
    },
    { timeout: timeoutMs, interval: 100 },
  );
}

describe.skipIf(!dockerOrFail('agent/src/docker/runtime.test.ts'))(
  'container runtime against the real Docker engine',
  () => {
    let engine: RealEngine;
    let docker: Dockerode;
    let volumeRoot: string;
    const runtime = () => createContainerRuntime(docker);
    const context = () => ({ hostId, volumeRoot, gpuMode: 'env-only' as const });

    beforeAll(async () => {
      engine = await realEngine();
      ({ docker, volumeRoot } = engine);
    });

    afterAll(async () => {
      await engine?.remove(`anvil.host=${hostId}`, `anvil.run=${run}`);
    });

    it('creates and starts a container with labels, limits, ports, volume, GPU env and restart policy', async () => {
      const rt = runtime();
      const spec = workloadSpec(wid('full'), {
        command: ['sh', '-c', 'echo written > /data/hello.txt; sleep 3600'],
        env: { GREETING: 'hi' },
        gpus: [{ index: 0, uuid: 'GPU-sim-0' }],
        cpus: 0.5,
        memoryBytes: 64 * 1024 * 1024,
        shmBytes: 16 * 1024 * 1024,
        ports: [{ containerPort: 8080, protocol: 'tcp', hostPort: null, hostIp: '127.0.0.1' }],
        volume: { containerPath: '/data' },
        restartPolicy: { name: 'unless-stopped', maxRetries: 0 },
      });
      // Ports are published only where the operator opted in to direct ports, on that one address.
      const id = await rt.create(spec, {
        ...context(),
        directPorts: { address: '127.0.0.1', first: 41000, last: 41999 },
      });
      await rt.start(id);
      await rt.start(id); // 304 already started counts as done

      const details = await waitFor(async () => {
        const d = await rt.inspect(id);
        return d?.State.Running && d.NetworkSettings.Ports['8080/tcp'] ? d : null;
      });
      expect(details.Name).toBe(`/anvil-${spec.workloadId}`);
      expect(details.Config.Labels).toMatchObject({
        'anvil.managed': 'true',
        'anvil.workload': spec.workloadId,
        'anvil.host': hostId,
        'anvil.test': '1',
      });
      expect(details.Config.Env).toEqual(
        expect.arrayContaining(['GREETING=hi', 'NVIDIA_VISIBLE_DEVICES=GPU-sim-0']),
      );
      expect(details.HostConfig.NanoCpus).toBe(500_000_000);
      expect(details.HostConfig.Memory).toBe(64 * 1024 * 1024);
      expect(details.HostConfig.ShmSize).toBe(16 * 1024 * 1024);
      expect(details.HostConfig.RestartPolicy?.Name).toBe('unless-stopped');
      expect(details.HostConfig.DeviceRequests ?? []).toEqual([]);
      const binding = details.NetworkSettings.Ports['8080/tcp']?.[0];
      expect(binding?.HostIp).toBe('127.0.0.1');
      expect(Number(binding?.HostPort)).toBeGreaterThanOrEqual(41000);
      expect(Number(binding?.HostPort)).toBeLessThanOrEqual(41999);

      const file = join(volumeRoot, spec.workloadId, 'hello.txt');
      expect(await waitFor(() => readFile(file, 'utf8').catch(() => null))).toBe('written\n');

      const listed = await rt.listManaged(hostId);
      expect(listed.filter((c) => c.workloadId === spec.workloadId)).toEqual([
        expect.objectContaining({ id, state: 'running', hostId, stopGraceSeconds: 1 }),
      ]);
      expect(await rt.listManaged(`${hostId}-other`)).toEqual([]);

      await rt.stop(id, 0);
      await rt.stop(id, 0); // 304 already stopped
      await rt.remove(id);
      await rt.remove(id); // 404 gone
      expect(await rt.inspect(id)).toBeNull();
    });

    it('refuses a second container for the same workload', async () => {
      const rt = runtime();
      const spec = workloadSpec(wid('dup'));
      await rt.create(spec, context());
      await expect(rt.create(spec, context())).rejects.toThrow(/anvil-rt-.*-dup is already taken/);
      expect((await rt.listManaged(hostId)).filter((c) => c.workloadId === spec.workloadId)).toHaveLength(1);
    });

    it('stops with SIGTERM first, and SIGKILL only after the grace period', async () => {
      const rt = runtime();
      const polite = await rt.create(
        workloadSpec(wid('polite'), {
          command: ['sh', '-c', 'trap "exit 0" TERM; while true; do sleep 0.2; done'],
        }),
        context(),
      );
      const stubborn = await rt.create(
        workloadSpec(wid('stubborn'), {
          command: ['sh', '-c', 'trap "" TERM; while true; do sleep 0.2; done'],
        }),
        context(),
      );
      await Promise.all([rt.start(polite), rt.start(stubborn)]);

      let started = Date.now();
      await rt.stop(polite, 10);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect((await rt.inspect(polite))?.State.ExitCode).toBe(0);

      started = Date.now();
      await rt.stop(stubborn, 2);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
      expect((await rt.inspect(stubborn))?.State.ExitCode).toBe(137);
    });

    it('never touches a container without the anvil.managed label', async () => {
      const rt = runtime();
      const foreign = await docker.createContainer({
        Image: 'anvil-test/busybox:latest',
        Cmd: ['sleep', '3600'],
        Labels: { 'anvil.test': '1', 'anvil.run': run, 'anvil.workload': 'forged' },
      });
      await foreign.start();
      await expect(rt.stop(foreign.id, 0)).rejects.toThrow(/refusing to touch it/);
      await expect(rt.remove(foreign.id)).rejects.toThrow(/refusing to touch it/);
      await expect(rt.start(foreign.id)).rejects.toThrow(/refusing to touch it/);
      await expect(rt.inspect(foreign.id)).rejects.toThrow(/refusing to touch it/);
      expect((await foreign.inspect()).State.Running).toBe(true);
      expect((await rt.listManaged(hostId)).some((c) => c.id === foreign.id)).toBe(false);
    });

    it('proves ownership once: a container it created or listed is started and stopped without another inspect', async () => {
      const inspected: string[] = [];
      // The real engine, with container inspects counted.
      const counting = Object.create(docker) as Dockerode;
      counting.getContainer = (id: string) => {
        const container = docker.getContainer(id);
        const inspect = container.inspect.bind(container);
        container.inspect = ((...args: unknown[]) => {
          inspected.push(id);
          return (inspect as (...a: unknown[]) => unknown)(...args);
        }) as typeof container.inspect;
        return container;
      };
      const rt = createContainerRuntime(counting);
      const created = await rt.create(workloadSpec(wid('owned')), context());
      await rt.start(created);
      await rt.stop(created, 0);
      expect(inspected).toEqual([]);

      // A fresh runtime (an agent after a restart) learns ownership from the labelled list.
      const restarted = createContainerRuntime(counting);
      expect((await restarted.listManaged(hostId)).some((c) => c.id === created)).toBe(true);
      await restarted.start(created);
      await restarted.remove(created);
      expect(inspected).toEqual([]);
      // Once it is gone, an id is proven again (and found missing) rather than trusted.
      await restarted.remove(created);
      expect(inspected).toEqual([created]);
    });

    it("removes a workload's snapshots only: its own label, its repository, never the kept ones", async () => {
      const rt = runtime();
      const spec = workloadSpec(wid('snap'));
      const id = await rt.create(spec, context());
      const repository = `anvil-snapshots/rt-${run}-snap`;
      const commit = (tag: string) => rt.commit!(id, { repository, tag, comment: null });
      const [old, kept] = [await commit('old'), await commit('kept')];
      // Same repository, but committed from a container that is not this workload's: never touched.
      const foreign = await docker.createContainer({
        Image: 'anvil-test/busybox:latest',
        Labels: { 'anvil.test': '1', 'anvil.run': run, 'anvil.workload': 'someone-else' },
      });
      const forged = (await foreign.commit({ repo: repository, tag: 'forged' })) as { Id: string };
      try {
        const result = await rt.removeSnapshots!({
          workloadId: spec.workloadId,
          repository,
          keep: [kept.imageId],
        });
        expect(result).toEqual({
          removed: [{ imageId: old.imageId, tags: [`${repository}:old`] }],
          failed: [],
          kept: [{ imageId: kept.imageId, tags: [`${repository}:kept`] }],
        });
        await expect(docker.getImage(old.imageId).inspect()).rejects.toThrow();
        expect((await docker.getImage(kept.imageId).inspect()).Id).toBe(kept.imageId);
        expect((await docker.getImage(forged.Id).inspect()).Id).toBe(forged.Id);
      } finally {
        await foreign.remove({ force: true });
        for (const image of [kept.imageId, forged.Id])
          await docker
            .getImage(image)
            .remove({ force: true })
            .catch(() => {});
      }
    });

    it('lists snapshot images with the bytes each adds to its parent, for storage metering', async () => {
      const writer = await docker.createContainer({
        Image: 'anvil-test/busybox:latest',
        Cmd: ['sh', '-c', 'head -c 1000000 /dev/urandom > /blob'],
        Labels: { 'anvil.test': '1', 'anvil.run': run, 'anvil.workload': `cluster_${run}` },
      });
      const repository = `anvil-snapshots/rt-${run}/usage`;
      try {
        await writer.start();
        await writer.wait();
        const committed = (await writer.commit({ repo: repository, tag: 'stop-1' })) as { Id: string };
        const base = await docker.getImage('anvil-test/busybox:latest').inspect();
        const usage = (await runtime().snapshotUsage!()).find((u) => u.imageId === committed.Id);
        expect(usage).toMatchObject({ repository, workloadId: `cluster_${run}` });
        // The 1 MB file (plus directory entries), not the base image the snapshot shares with others.
        expect(usage!.ownBytes).toBeGreaterThanOrEqual(1_000_000);
        expect(usage!.ownBytes).toBeLessThan(1_100_000);
        expect(usage!.sizeBytes).toBe(base.Size + usage!.ownBytes!);
      } finally {
        await writer.remove({ force: true });
        await docker
          .getImage(`${repository}:stop-1`)
          .remove({ force: true })
          .catch(() => {});
      }
    });

    it('answers ImageMissingError when the image to create from is not on the host', async () => {
      const spec = workloadSpec(wid('noimage'), { image: 'localhost:1/anvil-test/missing:v1' });
      await expect(runtime().create(spec, context())).rejects.toThrow(ImageMissingError);
    });

    it('says plainly when an image is missing and no registry answers', async () => {
      const rt = runtime();
      expect(await rt.imageExists('anvil-test/busybox:latest')).toBe(true);
      expect(await rt.imageExists('localhost:1/anvil-test/missing:latest')).toBe(false);
      await expect(rt.pull('localhost:1/anvil-test/missing', () => {})).rejects.toThrow(
        /^pull image localhost:1\/anvil-test\/missing:latest: .*\(no registry answered from this host\)$/,
      );
    });

    it('reports the engine version and runtimes', async () => {
      const info = await runtime().info();
      expect(info.error).toBeNull();
      expect(info.version).toMatch(/^\d+\.\d+/);
      expect(info.runtimes).toContain('runc');
      expect(info.nvidiaRuntime).toBe(info.runtimes.includes('nvidia'));
    });
  },
);

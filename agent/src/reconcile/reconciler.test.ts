import { randomBytes } from 'node:crypto';
import type { WorkloadSpec } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import { type RealEngine, realEngine, testReconciler } from '../../../test/agent/real-engine.ts';
import { BUSYBOX_IMAGE } from '../../../test/fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers } from '../../../test/fixtures/images/docker.ts';
import { type Clock, systemClock } from '../clock.ts';
import { buildCreateOptions } from '../docker/container-config.ts';
import { specHash } from '../docker/labels.ts';
import { type ContainerRuntime, createContainerRuntime } from '../docker/runtime.ts';
import type { PullReport } from './image-puller.ts';
import type { ActualReport, ContainerStateChange, Reconciler } from './reconciler.ts';

const run = randomBytes(4).toString('hex');
let engine: RealEngine;
let volumeRoot: string;
let docker: Dockerode;

function setup(
  hostId: string,
  passRetryMs = 200,
  runtime: ContainerRuntime = createContainerRuntime(docker),
  clock: Clock = systemClock,
) {
  const changes: ContainerStateChange[] = [];
  const reports: ActualReport[] = [];
  const pulls: PullReport[] = [];
  const reconciler = testReconciler({
    runtime,
    hostId,
    volumeRoot,
    clock,
    onContainerState: (c) => changes.push(c),
    onActualState: (r) => reports.push(r),
    onPullProgress: (p) => pulls.push(p),
    passRetryMs,
  });
  return { reconciler, changes, reports, pulls };
}

async function converge(reconciler: Reconciler, generation: number, specs: WorkloadSpec[]) {
  reconciler.setDesired(generation, specs);
  await reconciler.idle();
  return reconciler.report();
}

/** Time moved by hand: a timer fires when advance() passes it (retries fall due when the test says). */
class HandClock implements Clock {
  #now = Date.now();
  #next = 0;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();
  now(): number {
    return this.#now;
  }
  setTimeout(fn: () => void, ms: number): number {
    this.#next += 1;
    this.#timers.set(this.#next, { at: this.#now + ms, fn });
    return this.#next;
  }
  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number);
  }
  advance(ms: number): void {
    const until = this.#now + ms;
    for (;;) {
      const due = [...this.#timers].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.#timers.delete(due[0]);
      this.#now = due[1].at;
      due[1].fn();
    }
    this.#now = until;
  }
}

async function containersOf(hostId: string) {
  return docker.listContainers({ all: true, filters: { label: [`anvil.host=${hostId}`] } });
}

describe.skipIf(!dockerOrFail('agent/src/reconcile/reconciler.test.ts'))(
  'reconciler against the real Docker engine',
  () => {
    const hosts: string[] = [];
    const newHost = (name: string) => {
      const id = `host_rc_${run}_${name}`;
      hosts.push(id);
      return id;
    };
    const wid = (name: string) => `rc-${run}-${name}`;

    beforeAll(async () => {
      engine = await realEngine();
      ({ docker, volumeRoot } = engine);
    });

    afterAll(async () => {
      await engine?.remove(...hosts.map((host) => `anvil.host=${host}`), `anvil.run=${run}`);
    });

    it('converges to the desired set, idempotently, and reports actual state', async () => {
      const hostId = newHost('converge');
      const { reconciler, changes, reports } = setup(hostId);
      const specs = [workloadSpec(wid('a')), workloadSpec(wid('b'))];
      const report = await converge(reconciler, 1, specs);
      expect(report.generation).toBe(1);
      expect(report.workloads.map((w) => [w.workloadId, w.phase])).toEqual([
        [wid('a'), 'running'],
        [wid('b'), 'running'],
      ]);
      expect(report.workloads[0]?.ipAddress).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      expect(reports.at(-1)).toEqual(report);
      expect(changes.filter((c) => c.phase === 'running')).toHaveLength(2);
      // The change that says a container runs carries Docker's start time (it opens what bills from it).
      for (const c of changes.filter((c) => c.phase === 'running')) {
        expect(c.startedAt).toBe(report.workloads.find((w) => w.workloadId === c.workloadId)?.startedAt);
        expect(Date.parse(c.startedAt ?? '')).not.toBeNaN();
      }
      const ids = (await containersOf(hostId)).map((c) => c.Id).sort();
      expect(ids).toHaveLength(2);

      // Same set again: nothing created, nothing reported as changed.
      const changeCount = changes.length;
      await converge(reconciler, 1, specs);
      reconciler.trigger();
      await reconciler.idle();
      expect((await containersOf(hostId)).map((c) => c.Id).sort()).toEqual(ids);
      expect(changes).toHaveLength(changeCount);

      // Drop b: only b goes, a keeps its container.
      const next = await converge(reconciler, 2, [specs[0]!]);
      expect(next.workloads.map((w) => w.workloadId)).toEqual([wid('a')]);
      const left = await containersOf(hostId);
      expect(left.map((c) => c.Labels['anvil.workload'])).toEqual([wid('a')]);
      expect(ids).toContain(left[0]?.Id);
      expect(changes.at(-1)).toMatchObject({ workloadId: wid('b'), phase: 'removed' });
    });

    it('never touches a container without our label, nor one of another host', async () => {
      const hostId = newHost('foreign');
      const otherHost = newHost('other');
      const foreign = await docker.createContainer({
        Image: 'anvil-test/busybox:latest',
        Cmd: ['sleep', '3600'],
        Labels: { 'anvil.test': '1', 'anvil.run': run, 'anvil.workload': wid('x'), 'anvil.host': hostId },
      });
      await foreign.start();
      const spec = workloadSpec(wid('other-host'));
      const others = await docker.createContainer(
        buildCreateOptions(spec, { hostId: otherHost, volumeRoot, gpuMode: 'env-only', specHash: 'x' }),
      );
      await others.start();

      const { reconciler } = setup(hostId);
      await converge(reconciler, 1, []);
      expect((await foreign.inspect()).State.Running).toBe(true);
      expect((await others.inspect()).State.Running).toBe(true);
    });

    it('removes nothing before the first desired set arrives', async () => {
      const hostId = newHost('observe');
      const first = setup(hostId);
      await converge(first.reconciler, 1, [workloadSpec(wid('kept'))]);
      const before = await containersOf(hostId);

      // A restarted agent: fresh reconciler, no desired set yet, only observes.
      const restarted = setup(hostId);
      restarted.reconciler.trigger();
      await restarted.reconciler.idle();
      expect(restarted.reconciler.report()).toEqual({ generation: null, workloads: [] });
      expect(restarted.reconciler.running().map((r) => r.containerId)).toEqual(before.map((c) => c.Id));
      expect((await containersOf(hostId)).map((c) => c.Id)).toEqual(before.map((c) => c.Id));
    });

    it('adopts a container left half-done by a killed agent instead of creating another', async () => {
      const hostId = newHost('adopt');
      const spec = workloadSpec(wid('adopt'));
      const runtime = createContainerRuntime(docker);
      // The previous agent died between create and start.
      const createdId = await runtime.create(spec, { hostId, volumeRoot, gpuMode: 'env-only' });
      const { reconciler } = setup(hostId);
      const report = await converge(reconciler, 1, [spec]);
      expect(report.workloads[0]).toMatchObject({ phase: 'running', containerId: createdId });
      expect(await containersOf(hostId)).toHaveLength(1);
    });

    it('never creates a duplicate, even with two reconcilers racing', async () => {
      const hostId = newHost('race');
      const specs = [workloadSpec(wid('race1')), workloadSpec(wid('race2'))];
      const a = setup(hostId);
      const b = setup(hostId);
      a.reconciler.setDesired(1, specs);
      b.reconciler.setDesired(1, specs);
      await Promise.all([a.reconciler.idle(), b.reconciler.idle()]);
      // The loser of each name race retries shortly and adopts the winner's container: poll until both report it.
      const bothRunning = () =>
        [a, b].every((x) => x.reconciler.report().workloads.every((w) => w.phase === 'running'));
      await vi.waitFor(
        async () => {
          await Promise.all([a.reconciler.idle(), b.reconciler.idle()]);
          if (!bothRunning()) throw new Error('a reconciler has not adopted the winner yet');
        },
        { timeout: 30_000, interval: 100 },
      );
      const list = await containersOf(hostId);
      expect(list.map((c) => c.Labels['anvil.workload']).sort()).toEqual([wid('race1'), wid('race2')]);
      expect(a.reconciler.report().workloads.map((w) => w.phase)).toEqual(['running', 'running']);
      expect(b.reconciler.report().workloads.map((w) => w.phase)).toEqual(['running', 'running']);
    });

    it('retries every workload held back by a taken name, not only the first one to fail', async () => {
      const hostId = newHost('retries');
      const [w1, w2] = [workloadSpec(wid('late1')), workloadSpec(wid('late2'))];
      // Containers Anvil does not own hold both names for a while.
      const squatters = await Promise.all(
        [w1, w2].map((w) =>
          docker.createContainer({
            name: `anvil-${w.workloadId}`,
            Image: 'anvil-test/busybox:latest',
            Labels: { 'anvil.test': '1', 'anvil.run': run },
          }),
        ),
      );
      const clock = new HandClock();
      const { reconciler } = setup(hostId, 4_000, createContainerRuntime(docker), clock);
      await converge(reconciler, 1, [w1]);
      // w2's name clash comes 2 s later, so its retry falls due after w1's retry pass has run.
      clock.advance(2_000);
      const held = await converge(reconciler, 2, [w1, w2]);
      expect(held.workloads.map((w) => w.phase)).toEqual(['pending', 'pending']);
      await Promise.all(squatters.map((c) => c.remove({ force: true })));
      // w1's retry pass, then w2's, each when its time comes.
      clock.advance(2_000);
      await reconciler.idle();
      expect(reconciler.report().workloads.map((w) => w.phase)).toEqual(['running', 'pending']);
      clock.advance(2_000);
      await reconciler.idle();
      expect(reconciler.report().workloads.map((w) => w.phase)).toEqual(['running', 'running']);
    });

    it('removes duplicates found on the host, keeping the running one', async () => {
      const hostId = newHost('dups');
      const spec = workloadSpec(wid('dup'));
      const context = { hostId, volumeRoot, gpuMode: 'env-only' as const };
      const hash = specHash(spec, context);
      const running = await docker.createContainer(buildCreateOptions(spec, { ...context, specHash: hash }));
      await running.start();
      // A second container for the same workload under another name (e.g. from an older agent).
      const stray = await docker.createContainer({
        ...buildCreateOptions(spec, { ...context, specHash: hash }),
        name: `anvil-${wid('dup')}-stray`,
      });
      const { reconciler } = setup(hostId);
      const report = await converge(reconciler, 1, [spec]);
      expect(report.workloads[0]?.containerId).toBe(running.id);
      expect((await containersOf(hostId)).map((c) => c.Id)).toEqual([running.id]);
      await expect(stray.inspect()).rejects.toMatchObject({ statusCode: 404 });
    });

    it('recreates a container whose spec changed', async () => {
      const hostId = newHost('change');
      const { reconciler } = setup(hostId);
      const first = await converge(reconciler, 1, [workloadSpec(wid('chg'), { env: { V: '1' } })]);
      const second = await converge(reconciler, 2, [workloadSpec(wid('chg'), { env: { V: '2' } })]);
      expect(second.workloads[0]?.phase).toBe('running');
      expect(second.workloads[0]?.containerId).not.toBe(first.workloads[0]?.containerId);
      const list = await containersOf(hostId);
      expect(list).toHaveLength(1);
      const env = (await docker.getContainer(list[0]!.Id).inspect()).Config.Env;
      expect(env).toContain('V=2');
    });

    it('restarts an always-restart workload stopped behind its back, and leaves a finished job exited', async () => {
      const hostId = newHost('restart');
      const { reconciler } = setup(hostId);
      const service = workloadSpec(wid('svc'), { restartPolicy: { name: 'always', maxRetries: 0 } });
      const job = workloadSpec(wid('job'), { command: ['sh', '-c', 'exit 3'] });
      await converge(reconciler, 1, [service, job]);
      const serviceId = reconciler.report().workloads[0]!.containerId!;
      await docker.getContainer(serviceId).stop({ t: 0 });
      await vi.waitFor(
        async () => expect((await docker.getContainer(serviceId).inspect()).State.Status).toBe('exited'),
        { timeout: 15_000, interval: 50 },
      );
      reconciler.trigger();
      await reconciler.idle();
      const [svc, done] = reconciler.report().workloads;
      expect(svc).toMatchObject({ phase: 'running', containerId: serviceId });
      expect(done).toMatchObject({ phase: 'exited', exitCode: 3 });
    });

    it('reports a workload running again at once, not after the retry delay of the start that failed', async () => {
      const hostId = newHost('back');
      // The engine refuses the first start, as a dockerd shutting down does; the retry is 30 s away.
      const real = createContainerRuntime(docker);
      let refusals = 1;
      const runtime: ContainerRuntime = {
        ...real,
        start: async (id) => {
          if (refusals-- > 0) throw new Error('Error response from daemon: the engine is shutting down');
          return real.start(id);
        },
      };
      const { reconciler, changes } = setup(hostId, 200, runtime);
      const spec = workloadSpec(wid('back'), { restartPolicy: { name: 'always', maxRetries: 0 } });
      await converge(reconciler, 1, [spec]);
      expect(reconciler.report().workloads[0]).toMatchObject({
        phase: 'failed',
        error: expect.stringMatching(/shutting down/),
      });
      const [created] = await containersOf(hostId);

      // The container runs again without us (the engine's restart as it came back, or an operator).
      await docker.getContainer(created!.Id).start();
      reconciler.trigger();
      await reconciler.idle();
      expect(reconciler.report().workloads[0]).toMatchObject({
        phase: 'running',
        containerId: created!.Id,
        error: null,
      });
      expect(changes.at(-1)).toMatchObject({ workloadId: wid('back'), phase: 'running' });
    });

    it('reports a clear error when the image cannot be pulled', async () => {
      const hostId = newHost('pull');
      const { reconciler, pulls, reports } = setup(hostId);
      const spec = workloadSpec(wid('pull'), { image: 'localhost:1/anvil-test/missing:v1' });
      await converge(reconciler, 1, [spec]);
      // The first pass reports the pull under way (it may already have failed by the time idle() returns).
      expect(reports[0]?.workloads[0]?.phase).toBe('pulling');
      await vi.waitFor(
        async () => {
          await reconciler.idle();
          expect(reconciler.report().workloads[0]?.phase).toBe('failed');
        },
        { timeout: 10_000, interval: 100 },
      );
      expect(reconciler.report().workloads[0]).toMatchObject({
        phase: 'failed',
        containerId: null,
        error: expect.stringMatching(
          /^pull image localhost:1\/anvil-test\/missing:v1: .*no registry answered/,
        ),
      });
      expect(pulls.at(-1)).toMatchObject({ image: spec.image, workloadId: spec.workloadId, done: true });
      expect(pulls.at(-1)?.error).toContain('pull image');
      expect(await containersOf(hostId)).toEqual([]);
    });

    it('runs a snapshot image only for the account that made it', async () => {
      const hostId = newHost('snap');
      const { reconciler } = setup(hostId);
      // Committed from a container labelled with its account, as a stop with save_state does.
      const source = await docker.createContainer({
        Image: BUSYBOX_IMAGE,
        Cmd: ['true'],
        Labels: { 'anvil.test': '1', 'anvil.run': run, 'anvil.account': 'acc_a' },
      });
      const repository = `anvil-snapshots/acc_a/cluster_rc${run}`;
      await source.commit({ repo: repository, tag: 's' });
      await source.remove({ force: true });
      try {
        const image = `${repository}:s`;
        const command = ['sh', '-c', 'trap "exit 0" TERM; while true; do sleep 1; done'];
        const theirs = workloadSpec(wid('snap-b'), { image, command, labels: { 'anvil.account': 'acc_b' } });
        const mine = workloadSpec(wid('snap-a'), { image, command, labels: { 'anvil.account': 'acc_a' } });
        const report = await converge(reconciler, 1, [theirs, mine]);
        expect(report.workloads.find((w) => w.workloadId === theirs.workloadId)).toMatchObject({
          phase: 'failed',
          containerId: null,
          error: expect.stringContaining('belongs to another account'),
        });
        expect(report.workloads.find((w) => w.workloadId === mine.workloadId)?.phase).toBe('running');
        expect((await containersOf(hostId)).map((c) => c.Labels['anvil.workload'])).toEqual([
          mine.workloadId,
        ]);
      } finally {
        await removeTestContainers(docker, `anvil.host=${hostId}`);
        await docker.getImage(`${repository}:s`).remove({ force: true });
      }
    });
  },
);

import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import { type AgentProcess, anvilContainers, spawnAgent } from './agent-process.ts';
import { FleetControlPlane } from './control-plane.ts';
import { type Dockerd, startDockerd } from './docker.ts';
import { busyboxSpec, createWorkload, removeRunContainers, runLabel } from './fixtures.ts';
import { TcpRelay } from './relay.ts';
import { step, waitFor } from './wait.ts';

const LONG = 400_000;

/**
 * Issue 3, point 7's faults with the real control plane and a real agent process on a dockerd of its
 * own (so the engine can be restarted without touching the system's): agent kill -9, dockerd restart,
 * control-plane restart, network drop. Each time: no workload lost, none duplicated, no orphan.
 */
describe.skipIf(!dockerOrFail('fleet fault tests', { extraDaemons: true }))(
  'faults through the real control plane',
  () => {
    const run = runLabel();
    let dockerd: Dockerd;
    let system: Dockerode;
    let cp: FleetControlPlane;
    let relay: TcpRelay;
    let agent: AgentProcess;
    let hostId: string;
    const workloads: string[] = [];

    beforeAll(async () => {
      system = testDocker();
      step('faults: starting dockerd');
      dockerd = await startDockerd('faults');
      step('faults: dockerd up');
      await ensureBusyboxImage(dockerd.docker);
      cp = await FleetControlPlane.start();
      step('faults: control plane up');
      relay = await TcpRelay.start(cp.port);
      agent = await spawnAgent({
        controlPlaneUrl: relay.url,
        joinToken: await cp.joinToken(),
        dockerHost: dockerd.dockerHost,
      });
      hostId = await agent.hostId();
      step(`faults: registered ${hostId}`);
      await cp.readyHost(hostId, undefined, agent);
      step('faults: host ready');
      for (let i = 0; i < 2; i += 1) workloads.push(await createWorkload(cp, hostId, spec()));
    }, LONG);

    afterAll(async () => {
      await agent?.kill('SIGKILL');
      await relay?.close();
      await cp?.close();
      await removeRunContainers(system, run.filter);
      await dockerd?.destroy();
    }, LONG);

    /** Long-running services, as clusters are: they come back after the engine restarts. */
    const spec = () => busyboxSpec(run, { restartPolicy: { name: 'unless-stopped', maxRetries: 0 } });

    /**
     * Waits until every wanted workload runs in exactly one container of this host's engine, each
     * recorded by the control plane, with nothing else managed there; returns workload -> container id.
     */
    async function converged(): Promise<Map<string, string>> {
      return explained(() =>
        waitFor(
          'the fleet to converge',
          async () => {
            // Each unmet condition throws its reason, so a time-out says what never happened.
            const containers = await anvilContainers(dockerd.docker, hostId);
            const all = await dockerd.docker.listContainers({
              all: true,
              filters: { label: ['anvil.managed=true'] },
            });
            if (all.length !== containers.length)
              throw new Error(`orphans: ${all.length} managed containers`);
            const have = containers.map((c) => c.workload).join();
            if (have !== [...workloads].sort().join()) throw new Error(`containers for [${have}]`);
            const notRunning = containers.filter((c) => c.state !== 'running');
            if (notRunning.length > 0) throw new Error(`not running: ${JSON.stringify(notRunning)}`);
            const host = await cp.host(hostId);
            if (host.status !== 'ready' || !host.connected)
              throw new Error(`host ${host.status}, connected ${host.connected}`);
            for (const c of containers) {
              const r = await cp.workload(c.workload);
              if (r.phase !== 'running' || r.hostUnreachable || r.actualStatus?.containerId !== c.id)
                throw new Error(
                  `record ${r.id}: ${r.phase} ${r.hostUnreachable} ${r.actualStatus?.containerId}`,
                );
            }
            return new Map(containers.map((c) => [c.workload, c.id]));
          },
          90_000,
          250,
        ),
      );
    }

    /** A time-out's message gets the agent's last log lines. */
    async function explained<T>(wait: () => Promise<T>): Promise<T> {
      try {
        return await wait();
      } catch (error) {
        throw new Error(`${(error as Error).message}\n${agent.summary(25)}`);
      }
    }

    it(
      'starts the workloads on the host’s own engine only',
      async () => {
        const ids = await converged();
        expect(ids.size).toBe(2);
        // None of this host's containers landed in the system engine.
        expect(await anvilContainers(system, hostId)).toEqual([]);
      },
      LONG,
    );

    it(
      'survives agent kill -9 and restart: same containers, the change made meanwhile applied',
      async () => {
        const before = await converged();
        step(`faults: converged ${[...before.values()].join(' ')}`);
        agent.child.kill('SIGKILL');
        await agent.exited;
        // While the agent is dead, a workload is added: the restarted agent gets it with the desired set.
        workloads.push(await createWorkload(cp, hostId, spec()));
        agent = await spawnAgent({
          controlPlaneUrl: relay.url,
          stateDir: agent.stateDir,
          dockerHost: dockerd.dockerHost,
        });
        const after = await converged();
        for (const [workload, id] of before) expect(after.get(workload)).toBe(id);
        expect(after.size).toBe(3);
      },
      LONG,
    );

    it(
      'survives a dockerd restart: every workload runs again, none twice, nothing orphaned',
      async () => {
        const before = await converged();
        step(`faults: converged ${[...before.values()].join(' ')}`);
        await dockerd.restart();
        const after = await converged();
        expect([...after.keys()].sort()).toEqual([...before.keys()].sort());
        // The stopped containers are started again rather than recreated.
        for (const [workload, id] of before) expect(after.get(workload)).toBe(id);
      },
      LONG,
    );

    it(
      'survives a control-plane restart: the agent reconnects and its containers are adopted',
      async () => {
        const before = await converged();
        step(`faults: converged ${[...before.values()].join(' ')}`);
        await cp.restart(1_000);
        const after = await converged();
        expect(after).toEqual(before);
        // The new control plane still drives the host: a deletion reaches it.
        const gone = workloads.pop()!;
        await cp.context.fleet.workloads.setDesired(gone, 'deleted');
        const trimmed = await converged();
        expect(trimmed.has(gone)).toBe(false);
        expect((await cp.workload(gone)).phase).toBe('removed');
      },
      LONG,
    );

    it(
      'survives a network drop: changes made while cut off apply on reconnect',
      async () => {
        const before = await converged();
        step(`faults: converged ${[...before.values()].join(' ')}`);
        relay.cut('reset');
        await waitFor(
          'the host to lose its connection',
          async () => !(await cp.host(hostId)).connected,
          30_000,
        );
        workloads.push(await createWorkload(cp, hostId, spec()));
        relay.restore();
        const after = await converged();
        for (const [workload, id] of before) expect(after.get(workload)).toBe(id);
        expect(after.size).toBe(before.size + 1);
      },
      LONG,
    );
  },
);

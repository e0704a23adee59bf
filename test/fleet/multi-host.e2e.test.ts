import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import { type AgentProcess, anvilContainers, spawnAgent } from './agent-process.ts';
import { FleetControlPlane } from './control-plane.ts';
import { type Dockerd, startDockerd } from './docker.ts';
import { busyboxSpec, createWorkload, removeRunContainers, runLabel } from './fixtures.ts';
import { waitFor } from './wait.ts';

const LONG = 400_000;

/** Issue 3's proof: two hosts in one test, each an agent process with its own dockerd. */
describe.skipIf(!dockerOrFail('fleet multi-host tests', { extraDaemons: true }))(
  'two hosts, two engines',
  () => {
    const run = runLabel();
    let system: Dockerode;
    let cp: FleetControlPlane;
    const engines: Dockerd[] = [];
    const agents: AgentProcess[] = [];

    beforeAll(async () => {
      system = testDocker();
      cp = await FleetControlPlane.start();
      const started = await Promise.all([startDockerd('east'), startDockerd('west')]);
      engines.push(...started);
      await Promise.all(engines.map((e) => ensureBusyboxImage(e.docker)));
    }, LONG);

    afterAll(async () => {
      await Promise.all(agents.map((a) => a.kill('SIGKILL')));
      await cp?.close();
      await removeRunContainers(system, run.filter);
      await Promise.all(engines.map((e) => e.destroy()));
    }, LONG);

    it(
      'places workloads on each host, each host’s containers only in its own engine',
      async () => {
        const token = await cp.joinToken({ maxUses: 2 });
        agents.push(
          ...(await Promise.all(
            engines.map((e) =>
              spawnAgent({ controlPlaneUrl: cp.url, joinToken: token, dockerHost: e.dockerHost }),
            ),
          )),
        );
        const hostIds = await Promise.all(agents.map((a) => a.hostId()));
        expect(new Set(hostIds).size).toBe(2);
        await Promise.all(hostIds.map((id, i) => cp.readyHost(id, undefined, agents[i])));
        const listed = await cp.call<{ hosts: { id: string; status: string; gpus: { count: number } }[] }>(
          'GET',
          '/v2/admin/hosts',
        );
        expect(listed.body.hosts.map((h) => [h.id, h.status, h.gpus.count]).sort()).toEqual(
          hostIds.map((id) => [id, 'ready', 2]).sort(),
        );

        const placed = new Map<string, string[]>();
        for (const [i, hostId] of hostIds.entries()) {
          const ids: string[] = [];
          for (let n = 0; n < i + 1; n += 1) ids.push(await createWorkload(cp, hostId, busyboxSpec(run)));
          placed.set(hostId, ids.sort());
        }

        await waitFor(
          'every workload running on its host',
          async () => {
            for (const [i, hostId] of hostIds.entries()) {
              const containers = await anvilContainers(engines[i]!.docker, hostId);
              const want = placed.get(hostId)!;
              if (containers.map((c) => c.workload).join() !== want.join()) return false;
              if (!containers.every((c) => c.state === 'running')) return false;
            }
            return true;
          },
          90_000,
        );
        for (const [i, hostId] of hostIds.entries()) {
          const own = engines[i]!.docker;
          const other = engines[1 - i]!.docker;
          // Every managed container in this engine belongs to this host; none of its containers elsewhere.
          const managed = await own.listContainers({ all: true, filters: { label: ['anvil.managed=true'] } });
          expect(managed.map((c) => c.Labels['anvil.host'])).toEqual(placed.get(hostId)!.map(() => hostId));
          expect(await anvilContainers(other, hostId)).toEqual([]);
          expect(await anvilContainers(system, hostId)).toEqual([]);
          // The control plane records the container ids the engine has (once the agent's report arrives).
          const inEngine = await anvilContainers(own, hostId);
          await waitFor(
            'the control plane to record the running containers',
            async () => {
              for (const c of inEngine) {
                const w = await cp.workload(c.workload);
                if (w.actualStatus?.containerId !== c.id || w.phase !== 'running') return false;
              }
              return true;
            },
            60_000,
          );
          const host = await cp.host(hostId);
          expect(host.workloads).toMatchObject({
            total: placed.get(hostId)!.length,
            running: placed.get(hostId)!.length,
          });
        }

        // Deleting one host's workloads leaves the other host's alone.
        const [first, second] = hostIds as [string, string];
        const secondBefore = await anvilContainers(engines[1]!.docker, second);
        for (const id of placed.get(first)!) await cp.context.fleet.workloads.setDesired(id, 'deleted');
        await waitFor(
          'the first host emptied',
          async () => (await anvilContainers(engines[0]!.docker, first)).length === 0,
          60_000,
        );
        expect(await anvilContainers(engines[1]!.docker, second)).toEqual(secondBefore);
      },
      LONG,
    );
  },
);

import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WorkloadSpec } from '@anvil/shared/protocol';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../agent/src/clock.ts';
import { createContainerRuntime } from '../../agent/src/docker/runtime.ts';
import { AccountNetworks, bridgeNameOf } from '../../agent/src/network/account-networks.ts';
import { createIptablesFirewall } from '../../agent/src/network/firewall.ts';
import { Reconciler } from '../../agent/src/reconcile/reconciler.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { workloadSpec } from '../agent/fixtures.ts';
import { ensureBusyboxImage, TEST_HOST_IMAGES } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import { type Dockerd, startDockerd } from '../fleet/docker.ts';
import { execIn, httpGetIn, type Listener, listen, ourRules } from './host-net.ts';

const run = randomBytes(4).toString('hex');
const enabled = dockerOrFail('account network firewall across a dockerd restart', { extraDaemons: true });

/**
 * The agent's account networks and firewall rules on a private dockerd (never the shared engine): the
 * rules hold across a dockerd restart, come back after being flushed (a reboot), keep two accounts apart
 * the whole time, and are gone, with the networks, when the last workload goes.
 */
describe.skipIf(!enabled)('account network rules across a dockerd restart', () => {
  let dockerd: Dockerd;
  let volumeRoot: string;
  let reconciler: Reconciler;
  let listener: Listener;
  const hostId = `host_iso_${run}`;
  const firewall = createIptablesFirewall();
  const networks = [`anvil-acct-a${run}`, `anvil-acct-b${run}`];
  const bridges = networks.map((n) => bridgeNameOf(hostId, n));
  const web = `iso-${run}-a`;
  const shell = `iso-${run}-b`;
  const specs: WorkloadSpec[] = [
    workloadSpec(web, {
      accountId: `a${run}`,
      command: ['sh', '-c', 'mkdir -p /www && echo hello-a > /www/index.html && httpd -f -p 8080 -h /www'],
      restartPolicy: { name: 'always', maxRetries: 0 },
    }),
    workloadSpec(shell, {
      accountId: `b${run}`,
      command: ['sh', '-c', 'while true; do sleep 1; done'],
      restartPolicy: { name: 'always', maxRetries: 0 },
    }),
  ];

  const container = async (workloadId: string) => {
    const [c] = await dockerd.docker.listContainers({ filters: { label: [`anvil.workload=${workloadId}`] } });
    if (!c) throw new Error(`no running container for ${workloadId}`);
    return dockerd.docker.getContainer(c.Id).inspect();
  };
  const converged = async () => {
    reconciler.trigger();
    await reconciler.idle();
    return reconciler.report().workloads.every((w) => w.phase === 'running');
  };
  /** B tries A's page and a listener on the host (through B's gateway): both must fail. */
  const attempts = async () => {
    const a = await container(web);
    const b = await container(shell);
    const ipA = Object.values(a.NetworkSettings.Networks)[0]?.IPAddress ?? '';
    const gateway = Object.values(b.NetworkSettings.Networks)[0]?.Gateway ?? '';
    // The page is up: A reaches its own address.
    expect((await httpGetIn(dockerd.docker, a.Id, ipA, 8080)).output).toContain('hello-a');
    const toA = await httpGetIn(dockerd.docker, b.Id, ipA, 8080);
    const toHost = await execIn(dockerd.docker, b.Id, ['nc', '-w', '3', gateway, String(listener.port)]);
    return { toA, toHost };
  };
  const rulesPresent = async () => {
    for (const bridge of bridges) {
      expect(await ourRules('iptables', 'INPUT', bridge)).toHaveLength(1);
      expect(await ourRules('iptables', 'DOCKER-USER', bridge)).toHaveLength(3);
    }
  };

  beforeAll(async () => {
    dockerd = await startDockerd('iso');
    await ensureBusyboxImage(dockerd.docker);
    volumeRoot = await mkdtemp(join(tmpdir(), 'anvil-iso-volumes-'));
    listener = await listen('0.0.0.0');
    const logger = pino({ level: 'silent' });
    reconciler = new Reconciler({
      hostImages: TEST_HOST_IMAGES,
      runtime: createContainerRuntime(dockerd.docker),
      hostId,
      volumeRoot,
      gpuMode: 'env-only',
      clock: systemClock,
      logger,
      onContainerState: () => {},
      onActualState: () => {},
      onPullProgress: () => {},
      passRetryMs: 200,
      networks: new AccountNetworks({ docker: dockerd.docker, hostId, firewall, logger }),
    });
    reconciler.setDesired(1, specs);
    await waitFor('both workloads running', converged, 120_000);
  }, 300_000);

  afterAll(async () => {
    reconciler?.stop();
    await listener?.close();
    if (dockerd) {
      const list = await dockerd.docker.listContainers({ all: true }).catch(() => []);
      for (const c of list)
        await dockerd.docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {});
      for (const name of networks)
        await dockerd.docker
          .getNetwork(name)
          .remove()
          .catch(() => {});
      await dockerd.destroy();
    }
    for (const bridge of bridges) await firewall.remove(bridge);
    if (volumeRoot) await rm(volumeRoot, { recursive: true, force: true });
  });

  it('keeps the accounts apart and the host unreachable, before and after dockerd restarts', {
    timeout: 300_000,
  }, async () => {
    await rulesPresent();
    const before = await attempts();
    expect(before.toA.output).not.toContain('hello-a');
    expect(before.toHost.output).not.toContain('hello from the host');

    await dockerd.restart();
    await waitFor('both workloads running again', converged, 120_000);
    await rulesPresent();
    const after = await attempts();
    expect(after.toA.output).not.toContain('hello-a');
    expect(after.toHost.output).not.toContain('hello from the host');
    expect(listener.accepted()).toBe(0);
  });

  it('puts flushed rules back on the next pass, as after a reboot', async () => {
    for (const bridge of bridges) await firewall.remove(bridge);
    expect(await ourRules('iptables', 'INPUT', bridges[0]!)).toEqual([]);
    await converged();
    await rulesPresent();
  });

  it('leaves no network and no rule behind when the last workload goes', { timeout: 120_000 }, async () => {
    const before = await dockerd.docker.listNetworks({ filters: { label: [`anvil.host=${hostId}`] } });
    expect(before.map((n) => n.Name).sort()).toEqual([...networks].sort());
    await rulesPresent();
    reconciler.setDesired(2, []);
    await reconciler.idle();
    await waitFor(
      'networks removed',
      async () => {
        reconciler.trigger();
        await reconciler.idle();
        const left = await dockerd.docker.listNetworks({ filters: { label: [`anvil.host=${hostId}`] } });
        return left.length === 0;
      },
      60_000,
    );
    for (const bridge of bridges) {
      expect(await ourRules('iptables', 'INPUT', bridge)).toEqual([]);
      expect(await ourRules('ip6tables', 'INPUT', bridge)).toEqual([]);
      expect(await ourRules('iptables', 'DOCKER-USER', bridge)).toEqual([]);
    }
  });
});

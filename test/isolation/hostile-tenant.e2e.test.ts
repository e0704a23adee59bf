import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bridgeNameOf } from '../../agent/src/network/account-networks.ts';
import { PIDS_LIMIT } from '../../control-plane/src/fleet/workloads/limits.ts';
import { addAccount, call, type TestMember } from '../../control-plane/src/testing/accounts.ts';
import type { TestApp } from '../../control-plane/src/testing/app.ts';
import { type ClusterFleet, startClusterFleet, waitFor } from '../clusters/harness.ts';
import { BUSYBOX_IMAGE } from '../fixtures/images/busybox.ts';
import { dockerOrFail } from '../fixtures/images/docker.ts';
import {
  execIn,
  httpGetIn,
  type Listener,
  linkLocalInterface,
  linkLocalNamespace,
  listen,
  ourRules,
  removeTestNetworks,
} from './host-net.ts';

const LINK_LOCAL = '169.254.77.7';

/**
 * Two accounts on one host (control plane on loopback, a real agent, real Docker): B's container tries
 * everything a hostile tenant would try from inside, with busybox tools, and none of it gets through,
 * while A's own port still answers through the agent's tunnel.
 */
describe.skipIf(!dockerOrFail('test/isolation/hostile-tenant.e2e.test.ts'))(
  'a hostile tenant on a shared host',
  () => {
    let fleet: ClusterFleet;
    let t: TestApp;
    let docker: Dockerode;
    let hostId: string;
    let mallory: TestMember;
    let alice: string;
    let bob: string;
    let hostListener: Listener;
    let linkLocalListener: Listener;
    let dummy: { remove(): Promise<void> } | null = null;
    let namespace: Awaited<ReturnType<typeof linkLocalNamespace>> | null = null;
    const dummyName = `anvll${process.pid % 100_000}`;

    const create = async (key: TestMember | null, name: string, command: string) => {
      const r = await call(t, {
        method: 'POST',
        url: '/v1/clusters',
        ...(key ? { key } : {}),
        payload: {
          name,
          docker_image: BUSYBOX_IMAGE,
          gpu_type: 'H100',
          cpu_cores: 1,
          memory_gb: 1,
          storage_gb: 1,
          command,
          ports: [{ internal_port: 8080, description: 'web' }],
        },
      });
      expect(r.statusCode, r.body).toBe(201);
      return r.json().data.id as string;
    };
    const statusOf = async (key: TestMember | null, id: string) =>
      (await call(t, { url: `/v1/clusters/${id}`, ...(key ? { key } : {}) })).json().data;
    const containerOf = async (id: string) => {
      const [c] = await docker.listContainers({ filters: { label: [`anvil.workload=${id}`] } });
      if (!c) throw new Error(`no container for ${id}`);
      return docker.getContainer(c.Id).inspect();
    };
    const ipOf = (details: Dockerode.ContainerInspectInfo) =>
      Object.values(details.NetworkSettings.Networks)[0]?.IPAddress ?? '';
    const gatewayOf = (details: Dockerode.ContainerInspectInfo) =>
      Object.values(details.NetworkSettings.Networks)[0]?.Gateway ?? '';
    /** A's web page through the control plane's tunnel to the agent, as the proxy and SSH -L reach it. */
    const throughTunnel = async (id: string) => {
      const stream = await t.context.fleet.tunnels.openStream(id, 8080);
      stream.end('GET /index.html HTTP/1.0\r\n\r\n');
      const chunks: Buffer[] = [];
      for await (const chunk of stream) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString();
    };

    beforeAll(async () => {
      fleet = await startClusterFleet();
      ({ t, docker, hostId } = fleet);
      await t.context.clusters.prices.set({ H100: 3.6 });
      mallory = await addAccount(t, 'Mallory');

      alice = await create(
        null,
        'alice-web',
        'mkdir -p /www && echo hello-alice > /www/index.html && httpd -f -p 8080 -h /www',
      );
      bob = await create(mallory, 'bob-shell', 'while true; do sleep 1; done');
      for (const [key, id] of [
        [null, alice],
        [mallory, bob],
      ] as const) {
        await waitFor(`${id} running`, async () => (await statusOf(key, id))?.status === 'running', 240_000);
      }
      hostListener = await listen('0.0.0.0');
      dummy = await linkLocalInterface(dummyName, LINK_LOCAL);
      linkLocalListener = await listen(LINK_LOCAL);
      namespace = await linkLocalNamespace(`anvns${process.pid % 100_000}`, 'metadata-stand-in');
    }, 400_000);

    afterAll(async () => {
      await fleet?.close();
      if (hostId) await removeTestNetworks(docker, hostId);
      await hostListener?.close();
      await linkLocalListener?.close();
      await dummy?.remove().catch(() => {});
      await namespace?.remove().catch(() => {});
    });

    it('puts each account on its own network, with nothing published and the limits set', async () => {
      const a = await containerOf(alice);
      const b = await containerOf(bob);
      expect(Object.keys(a.NetworkSettings.Networks)).toEqual([`anvil-acct-${t.accountId}`]);
      expect(Object.keys(b.NetworkSettings.Networks)).toEqual([`anvil-acct-${mallory.accountId}`]);
      for (const details of [a, b]) {
        const host = details.HostConfig;
        expect(host.CapDrop).toEqual(['ALL']);
        expect(host.CapAdd).not.toContain('NET_RAW');
        expect(host.SecurityOpt).toContain('no-new-privileges:true');
        expect(host.PidsLimit).toBe(PIDS_LIMIT);
        expect(host.Memory).toBe(1024 ** 3);
        expect(host.NanoCpus).toBe(1e9);
        expect(host.Privileged).toBe(false);
        const bindings = Object.values(details.NetworkSettings.Ports ?? {}).flatMap((b) => b ?? []);
        expect(bindings).toEqual([]);
        expect(JSON.stringify(host.PortBindings ?? {})).not.toContain('0.0.0.0');
      }
      // What the API shows as external_port is the proxy's own port alias (<cluster>-<port>.<domain>), not
      // a port on the host: Docker published none (above).
    });

    it("B cannot reach A's container, while A's port answers through the tunnel", async () => {
      const a = await containerOf(alice);
      const b = await containerOf(bob);
      // The page is there: A reaches its own address, and the tunnel (host -> container) reaches it.
      expect((await httpGetIn(docker, a.Id, ipOf(a), 8080)).output).toContain('hello-alice');
      expect(await throughTunnel(alice)).toContain('hello-alice');
      const attempt = await httpGetIn(docker, b.Id, ipOf(a), 8080);
      expect(attempt.output).not.toContain('hello-alice');
    });

    it("B cannot reach the host's own ports, nor a link-local address", async () => {
      const b = await containerOf(bob);
      const toHost = await execIn(docker, b.Id, ['nc', '-w', '3', gatewayOf(b), String(hostListener.port)]);
      expect(toHost.output).not.toContain('hello from the host');
      expect(hostListener.accepted()).toBe(0);
      const toLinkLocal = await execIn(docker, b.Id, [
        'nc',
        '-w',
        '3',
        LINK_LOCAL,
        String(linkLocalListener.port),
      ]);
      expect(toLinkLocal.output).not.toContain('hello from the host');
      expect(linkLocalListener.accepted()).toBe(0);
      // The host itself reaches the forwarded link-local page; B does not.
      const page = `http://${namespace!.address}:${namespace!.port}/`;
      const fromHost = await fetch(page).then((r) => r.text());
      expect(fromHost).toContain('metadata-stand-in');
      const forwarded = await httpGetIn(docker, b.Id, namespace!.address, namespace!.port);
      expect(forwarded.output).not.toContain('metadata-stand-in');
    });

    it('a fork bomb and a memory hog in B leave A answering', { timeout: 300_000 }, async () => {
      const b = await containerOf(bob);
      // A memory hog (a string that doubles until the OOM killer ends it) and a bounded fork bomb: 6,000
      // sleeping processes asked for, more than the PID limit allows.
      const bomb =
        'awk \'BEGIN { s = "x"; while (1) s = s s }\' & i=0; while [ $i -lt 6000 ]; do sleep 600 & i=$((i+1)); done; wait';
      const exec = await docker.getContainer(b.Id).exec({ Cmd: ['sh', '-c', bomb] });
      await exec.start({ Detach: true });
      const saturated = await waitFor(
        'B at its PID limit',
        async () => {
          const stats = (await docker.getContainer(b.Id).stats({ stream: false })) as unknown as {
            pids_stats?: { current?: number; limit?: number };
          };
          const current = stats.pids_stats?.current ?? 0;
          return current >= PIDS_LIMIT - 8 ? stats.pids_stats : null;
        },
        240_000,
      );
      expect(saturated?.limit).toBe(PIDS_LIMIT);
      expect(saturated?.current).toBeLessThanOrEqual(PIDS_LIMIT);
      // A's health check still answers through the tunnel, and A itself can still start processes.
      expect(await throughTunnel(alice)).toContain('hello-alice');
      const a = await containerOf(alice);
      expect((await execIn(docker, a.Id, ['echo', 'alive'])).output).toContain('alive');
      const details = await docker.getContainer(b.Id).inspect();
      expect(details.HostConfig.Memory).toBe(1024 ** 3);
    });

    it('removes the networks and their firewall rules with the last workload', {
      timeout: 300_000,
    }, async () => {
      const networks = [`anvil-acct-${t.accountId}`, `anvil-acct-${mallory.accountId}`];
      const bridges = networks.map((n) => bridgeNameOf(hostId, n));
      for (const bridge of bridges) {
        expect(await ourRules('iptables', 'INPUT', bridge)).toHaveLength(1);
        expect(await ourRules('iptables', 'DOCKER-USER', bridge)).toHaveLength(3);
      }
      for (const [key, id] of [
        [null, alice],
        [mallory, bob],
      ] as const) {
        const del = await call(t, {
          method: 'DELETE',
          url: `/v1/clusters/${id}`,
          ...(key ? { key } : {}),
          payload: { confirm_deletion: 'DELETE', wait_for_completion: true, timeout_minutes: 3 },
        });
        expect(del.statusCode, del.body).toBe(200);
      }
      // The network goes first, then its rules (never a network left without them): wait for both.
      await waitFor(
        'networks and rules removed',
        async () => {
          const left = await docker.listNetworks({ filters: { label: [`anvil.host=${hostId}`] } });
          if (left.length > 0) return false;
          for (const bridge of bridges) {
            if ((await ourRules('iptables', 'INPUT', bridge)).length > 0) return false;
            if ((await ourRules('ip6tables', 'INPUT', bridge)).length > 0) return false;
            if ((await ourRules('iptables', 'DOCKER-USER', bridge)).length > 0) return false;
          }
          return true;
        },
        120_000,
      );
    });
  },
);

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { tempDir } from '../agent/harness.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import { FleetControlPlane } from '../fleet/control-plane.ts';
import { busyboxSpec, createWorkload, removeRunContainers, runLabel } from '../fleet/fixtures.ts';
import { waitFor } from '../fleet/wait.ts';
import { debianImage, debianImageOrFail } from './debian-rootfs.ts';

const run = promisify(execFile);

/** The version the test publishes after the install, to upgrade to. */
const NEWER = '0.1.1-e2e';

// COST: about 2-3 minutes warm (two artifact builds of ~12 s each, the agent starting twice in a fresh
// Debian); the first run of the day adds the debootstrap of the root filesystem (debian-rootfs.ts).
vi.setConfig({ testTimeout: 600_000, hookTimeout: 900_000 });

/** Runs `script` with sh in the container; rejects with its output when it fails. */
async function inContainer(name: string, script: string): Promise<string> {
  try {
    const { stdout, stderr } = await run('docker', ['exec', name, 'sh', '-c', script], {
      maxBuffer: 16 << 20,
    });
    return stdout + stderr;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`in ${name}: ${script}\n${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

/** The lines of the unit file a systemd-less test reproduces, by key. */
function unitValues(unit: string): Record<string, string> {
  const values: Record<string, string> = {};
  for (const line of unit.split('\n')) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (match) values[match[1]!] = match[2]!;
  }
  return values;
}

/**
 * Issue 20 point 2: a fresh Debian 12 machine (debootstrap minbase as a Docker image: no Node.js, no
 * checkout) joins with the one line the join-token answer prints, runs the agent as its unit file says,
 * and is upgraded by the control plane to a newer artifact while a workload's container keeps running.
 * The "server" is a container on the host's network namespace (it dials the control plane on loopback)
 * using the host's Docker engine through its socket. It has no systemd: the test runs the unit's
 * ExecStart with its EnvironmentFile in a loop that restarts it as Restart=always does, sparing the exit
 * codes of RestartPreventExitStatus.
 */
describe.skipIf(!dockerOrFail('self-install tests') || !debianImageOrFail())(
  'the agent installs itself from the control plane',
  () => {
    const labels = runLabel();
    const name = `anvil-test-debian-${randomBytes(4).toString('hex')}`;
    let docker: Dockerode;
    let cp: FleetControlPlane;
    let image: string;
    let volumes: string;

    beforeAll(async () => {
      docker = testDocker();
      await ensureBusyboxImage(docker);
      image = await debianImage(docker);
      volumes = await tempDir('anvil-self-install-volumes-');
      cp = await FleetControlPlane.start({
        env: { ANVIL_AGENT_ARTIFACTS_DIR: await tempDir('anvil-self-install-artifacts-') },
      });
    });

    afterAll(async () => {
      await docker
        ?.getContainer(name)
        .remove({ force: true })
        .catch(() => {});
      if (docker) await removeRunContainers(docker, labels.filter);
      await cp?.close();
    });

    it('joins with the one-line install on a fresh Debian 12, then upgrades with its containers left running', async () => {
      const token = await cp.call<{ value: string; installCommand: string }>(
        'POST',
        '/v2/admin/hosts/join-tokens',
        {
          body: { expiresIn: 600 },
        },
      );
      expect(token.status).toBe(201);
      const line = token.body.installCommand;
      expect(line).toBe(`curl -fsSL ${cp.url}/install.sh | sudo sh -s -- --join-token ${token.body.value}`);

      const server = await docker.createContainer({
        name,
        Image: image,
        Cmd: ['sleep', 'infinity'],
        Labels: { 'anvil.test': '1', [labels.key]: labels.value },
        HostConfig: {
          NetworkMode: 'host',
          // Workload volumes are bind-mounted by the host's engine: the same path on both sides.
          Binds: ['/var/run/docker.sock:/var/run/docker.sock', `${volumes}:${volumes}`],
        },
      });
      await server.start();
      expect(await inContainer(name, 'command -v node nodejs npm || echo none')).toBe('none\n');
      expect(await inContainer(name, '. /etc/os-release; echo $VERSION_ID')).toBe('12\n');

      // The line as printed; root already, and this machine has no sudo (minbase).
      const installed = await inContainer(
        name,
        `${line.replace('| sudo sh', '| sh')} --simulate-gpus 1xH100 --volume-root ${volumes}`,
      );
      expect(installed).toContain(`agent ${'0.1.0'} unpacked into /opt/anvil-agent/versions/0.1.0`);
      expect(installed).toContain('no systemd here');
      expect((await inContainer(name, 'readlink /opt/anvil-agent/current')).trim()).toBe('versions/0.1.0');
      // Test images are local only (nothing can be pulled here); an operator edits agent.env the same way.
      await inContainer(name, "echo 'ANVIL_HOST_IMAGES=anvil-test/*' >> /etc/anvil/agent.env");

      const unit = unitValues(await inContainer(name, 'cat /etc/systemd/system/anvil-agent.service'));
      expect(unit['ExecStart']).toBe(
        '/opt/anvil-agent/current/bin/node /opt/anvil-agent/current/lib/agent.mjs',
      );
      expect(unit['Restart']).toBe('always');
      expect(unit['KillMode']).toBe('process');
      const environmentFile = unit['EnvironmentFile']!;
      const prevent = unit['RestartPreventExitStatus']!;
      const supervisor =
        `cd ${unit['WorkingDirectory']}; while :; do ` +
        `(set -a; . ${environmentFile}; set +a; exec ${unit['ExecStart']}) >>/var/log/anvil-agent.log 2>&1; ` +
        `code=$?; case " ${prevent} " in *" $code "*) exit $code;; esac; sleep ${unit['RestartSec'] ?? 1}; done`;
      await run('docker', ['exec', '-d', name, 'sh', '-c', supervisor]);

      const agentLog = () =>
        inContainer(name, 'tail -n 20 /var/log/anvil-agent.log').catch((e: Error) => e.message);
      let hostId: string;
      try {
        hostId = await waitFor(
          'the installed agent to join',
          async () => {
            const list = await cp.call<{ hosts: { id: string; connected: boolean; agentVersion: string }[] }>(
              'GET',
              '/v2/admin/hosts',
            );
            return list.body.hosts.find((h) => h.connected)?.id ?? null;
          },
          240_000,
        );
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await agentLog()}`);
      }
      const joined = await cp.readyHost(hostId);
      expect(joined.agentVersion).toBe('0.1.0');
      expect(joined.inventory?.gpus.simulated).toBe(true);

      // A workload the upgrade must not touch.
      const workload = await createWorkload(cp, hostId, busyboxSpec(labels));
      const running = await waitFor(
        'the workload running',
        async () => {
          const record = await cp.workload(workload);
          return record.phase === 'running' ? record.actualStatus?.containerId : null;
        },
        120_000,
      );
      const before = await docker.getContainer(running!).inspect();

      // A newer version is published; the operator upgrades this host to it (pinned, audit-logged).
      await cp.context.fleet.artifacts.publish(NEWER, process.arch as 'x64');
      const upgrade = await cp.call<{ upgrade: { sent: boolean; to: string }; host: { pinned: string } }>(
        'POST',
        `/v2/admin/hosts/${hostId}/upgrade`,
        { body: { version: NEWER } },
      );
      expect(upgrade.status, upgrade.text).toBe(200);
      expect(upgrade.body.upgrade).toMatchObject({ sent: true, to: NEWER });
      expect(upgrade.body.host.pinned).toBe(NEWER);

      try {
        await waitFor(
          'the agent back with the new version',
          async () => {
            const host = await cp.host(hostId);
            return host.connected && host.agentVersion === NEWER;
          },
          240_000,
        );
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await agentLog()}`);
      }
      expect((await inContainer(name, 'readlink /opt/anvil-agent/current')).trim()).toBe(`versions/${NEWER}`);
      expect((await inContainer(name, 'cat /opt/anvil-agent/current/VERSION')).trim()).toBe(NEWER);

      // The workload's container was left alone: same container, same start, still running.
      const after = await docker.getContainer(running!).inspect();
      expect(after.Id).toBe(before.Id);
      expect(after.State.StartedAt).toBe(before.State.StartedAt);
      expect(after.State.Running).toBe(true);
      await waitFor(
        'the new agent reporting the workload running',
        async () => {
          const record = await cp.workload(workload);
          return record.phase === 'running' && record.actualStatus?.containerId === before.Id;
        },
        60_000,
      );

      const audit = await cp.call<{
        events: { action: string; resource?: { id: string }; details: Record<string, unknown> }[];
      }>('GET', '/v2/accounts/permissions/audit?type=fleet_change');
      expect(audit.body.events.find((e) => e.action === 'agent_upgrade')).toMatchObject({
        resource: { id: hostId },
        details: { from: '0.1.0', pinned: NEWER, sent: true },
      });
    });
  },
);

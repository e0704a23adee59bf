import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, openSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { removeAccountNetworks } from '../fixtures/images/docker.ts';
import { waitFor } from './wait.ts';

const run = promisify(execFile);

/**
 * One extra Docker engine beside the system's, as a simulated host of its own: its own socket, data
 * root, exec root, pid file and bridge (DESIGN.md: a daemon without its own bridge can take docker0
 * away from the system engine when it stops). Restartable; stop() removes every trace.
 */
export interface Dockerd {
  name: string;
  dockerHost: string;
  docker: Dockerode;
  bridge: string;
  /** SIGTERM and wait for exit, then start again over the same data root (containers survive, stopped). */
  restart(): Promise<void>;
  stopDaemon(): Promise<void>;
  startDaemon(): Promise<void>;
  /** Removes its containers, stops it, deletes its directories and its bridge. */
  destroy(): Promise<void>;
  log(): string;
}

const live = new Map<ChildProcess, { dir: string; bridge: string }>();
process.once('exit', () => {
  // A run that ends without afterAll (killed by a time-out) must not leave daemons, mounts or bridges.
  for (const [child, { dir, bridge }] of live) {
    child.kill('SIGKILL');
    const script = `sleep 1; grep -o " ${dir}[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l; rm -rf ${dir}; ip link del ${bridge}`;
    spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' }).unref();
  }
});

let counter = 0;

/**
 * `addressPool`: where this engine takes the subnets of the networks it creates (`--default-address-pool`,
 * e.g. `base=10.150.16.0/20,size=24`); engines on one kernel that create account networks need pools
 * apart, or their bridges claim the same routes.
 */
export async function startDockerd(label: string, options: { addressPool?: string } = {}): Promise<Dockerd> {
  // Taken before the first await: daemons started side by side must not share a number.
  const n = ++counter;
  const dir = await mkdtemp(join(tmpdir(), `anvil-dockerd-${label}-`));
  const socket = join(dir, 'docker.sock');
  // Interface names are at most 15 characters; the subnet is picked from the pid and a counter.
  const tag = `${process.pid % 10_000}${n}`.slice(-6);
  const bridge = `anvfl${tag}`;
  const octet = 100 + ((process.pid * 7 + n * 13) % 150);
  const second = 200 + (n % 50);
  const subnet = `10.${second}.${octet}`;
  // A bridge of the same name left by a killed run (same pid, same counter) would make `ip link add` fail.
  await run('ip', ['link', 'del', bridge]).catch(() => {});
  await run('ip', ['link', 'add', 'name', bridge, 'type', 'bridge']);
  await run('ip', ['addr', 'add', `${subnet}.1/24`, 'dev', bridge]);
  await run('ip', ['link', 'set', bridge, 'up']);
  const args = [
    '--host',
    `unix://${socket}`,
    '--data-root',
    join(dir, 'data'),
    '--exec-root',
    join(dir, 'exec'),
    '--pidfile',
    join(dir, 'docker.pid'),
    '--bridge',
    bridge,
    // The system engine owns the firewall rules; these engines need no NAT (nothing leaves the machine).
    '--iptables=false',
    '--ip-masq=false',
    ...(options.addressPool ? ['--default-address-pool', options.addressPool] : []),
  ];
  const logPath = join(dir, 'dockerd.log');
  let child: ChildProcess | null = null;
  const docker = new Dockerode({ socketPath: socket });

  async function startDaemon(): Promise<void> {
    const out = openSync(logPath, 'a');
    child = spawn('dockerd', args, { stdio: ['ignore', out, out] });
    live.set(child, { dir, bridge });
    const started = child;
    await waitFor(
      `dockerd ${label} to answer`,
      async () => {
        if (started.exitCode !== null) throw new Error(`dockerd ${label} exited: ${await readLog()}`);
        return (
          existsSync(socket) &&
          (await docker
            .ping()
            .then(() => true)
            .catch(() => false))
        );
      },
      30_000,
    );
  }

  async function stopDaemon(): Promise<void> {
    const current = child;
    if (!current || current.exitCode !== null) return;
    const exited = new Promise((resolve) => current.once('exit', resolve));
    current.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 20_000))]);
    if (current.exitCode === null) {
      current.kill('SIGKILL');
      await exited;
    }
    live.delete(current);
    child = null;
  }

  async function readLog(): Promise<string> {
    const { readFile } = await import('node:fs/promises');
    return readFile(logPath, 'utf8').catch(() => '');
  }

  let logText = '';
  await startDaemon();
  return {
    name: label,
    dockerHost: `unix://${socket}`,
    docker,
    bridge,
    restart: async () => {
      await stopDaemon();
      await startDaemon();
    },
    stopDaemon,
    startDaemon,
    log: () => logText,
    async destroy() {
      logText = await readLog();
      if (child) {
        const list = await docker.listContainers({ all: true }).catch(() => []);
        await Promise.all(
          list.map((c) =>
            docker
              .getContainer(c.Id)
              .remove({ force: true })
              .catch(() => {}),
          ),
        );
        // Their bridges and firewall rules would outlive the daemon.
        await removeAccountNetworks(docker);
      }
      await stopDaemon();
      // A mount left behind (a killed daemon) would make rm fail: unmount whatever is under the dir.
      await run('sh', ['-c', `grep -o " ${dir}[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l`]).catch(
        () => {},
      );
      await rm(dir, { recursive: true, force: true }).catch(() => {});
      await run('ip', ['link', 'del', bridge]).catch(() => {});
    },
  };
}

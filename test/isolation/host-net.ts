import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type Dockerode from 'dockerode';
import { removeAccountNetworks } from '../fixtures/images/docker.ts';

const run = promisify(execFile);

/** A TCP listener the test binds on the host: it greets and counts whoever connects. */
export interface Listener {
  port: number;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

export async function listen(host: string): Promise<Listener> {
  let count = 0;
  const server: Server = createServer((socket) => {
    count += 1;
    socket.end('hello from the host\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    accepted: () => count,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * An interface the test creates on the host (a bridge with no ports: this kernel has no dummy
 * interfaces), holding one link-local address as a /32, so no route for the whole range is added to the
 * machine. Traffic to it is for the host itself (INPUT). Never 169.254.169.254.
 */
export async function linkLocalInterface(
  name: string,
  address: string,
): Promise<{ remove(): Promise<void> }> {
  if (address === '169.254.169.254') throw new Error('never the metadata address');
  await run('ip', ['link', 'del', name]).catch(() => {});
  await run('ip', ['link', 'add', name, 'type', 'bridge']);
  await run('ip', ['addr', 'add', `${address}/32`, 'dev', name]);
  await run('ip', ['link', 'set', name, 'up']);
  return { remove: () => run('ip', ['link', 'del', name]).then(() => undefined) };
}

/**
 * A network namespace the test creates, joined to the host by a veth pair on a link-local /30, serving
 * a page with busybox httpd: traffic to it is forwarded by the host (FORWARD, DOCKER-USER), as traffic to
 * a metadata service on the local link would be. Never 169.254.169.254.
 */
export async function linkLocalNamespace(
  name: string,
  page: string,
): Promise<{ address: string; port: number; remove(): Promise<void> }> {
  const hostSide = `${name}h`;
  const nsSide = `${name}n`;
  const [hostAddress, address] = ['169.254.77.13', '169.254.77.14'];
  const port = 18_000 + (process.pid % 1000);
  const remove = async () => {
    await run('ip', ['netns', 'pids', name])
      .then(({ stdout }) => {
        for (const pid of stdout.split('\n').filter(Boolean)) process.kill(Number(pid), 'SIGKILL');
      })
      .catch(() => {});
    await run('ip', ['netns', 'del', name]).catch(() => {});
    await run('ip', ['link', 'del', hostSide]).catch(() => {});
  };
  await remove();
  await run('ip', ['netns', 'add', name]);
  await run('ip', ['link', 'add', hostSide, 'type', 'veth', 'peer', 'name', nsSide]);
  await run('ip', ['link', 'set', nsSide, 'netns', name]);
  await run('ip', ['addr', 'add', `${hostAddress}/30`, 'dev', hostSide]);
  await run('ip', ['link', 'set', hostSide, 'up']);
  const inNs = (...args: string[]) => run('ip', ['netns', 'exec', name, ...args]);
  await inNs('ip', 'addr', 'add', `${address}/30`, 'dev', nsSide);
  await inNs('ip', 'link', 'set', nsSide, 'up');
  await inNs('ip', 'link', 'set', 'lo', 'up');
  await inNs('ip', 'route', 'add', 'default', 'via', hostAddress);
  const dir = await mkdtemp(join(tmpdir(), 'anvil-ll-www-'));
  await writeFile(join(dir, 'index.html'), page);
  // busybox httpd daemonises; it dies with the namespace's processes in remove().
  await inNs('busybox', 'httpd', '-p', `${address}:${port}`, '-h', dir);
  return {
    address,
    port,
    remove: async () => {
      await remove();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Runs a command in a container (docker exec) and answers its exit code and output; never throws on a code. */
export async function execIn(
  docker: Dockerode,
  containerId: string,
  cmd: string[],
): Promise<{ code: number; output: string }> {
  const exec = await docker
    .getContainer(containerId)
    .exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  await new Promise<void>((resolve) => {
    stream.on('end', () => resolve());
    stream.on('close', () => resolve());
  });
  const info = await exec.inspect();
  // The multiplexed stream has 8-byte frame headers; for a text check the raw bytes are good enough.
  return { code: info.ExitCode ?? -1, output: Buffer.concat(chunks).toString('latin1') };
}

/**
 * An HTTP GET from inside a container with busybox nc (this busybox's static wget crashes): the
 * response as text, empty when the connection failed.
 */
export async function httpGetIn(docker: Dockerode, containerId: string, address: string, port: number) {
  return execIn(docker, containerId, [
    'sh',
    '-c',
    `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ${address} ${port}`,
  ]);
}

/** Rules of ours (by their comment) in one chain, as `iptables -S` prints them. */
export async function ourRules(
  binary: 'iptables' | 'ip6tables',
  chain: string,
  bridge: string,
): Promise<string[]> {
  const { stdout } = await run(binary, ['-w', '-S', chain]).catch(() => ({ stdout: '' }));
  return stdout.split('\n').filter((line) => line.includes(`anvil-isolation ${bridge}`));
}

/** Removes the account networks an agent of `hostId` left (a test that ended before its workloads), with their rules. */
export async function removeTestNetworks(docker: Dockerode, hostId: string): Promise<void> {
  await removeAccountNetworks(docker, [`anvil.host=${hostId}`]);
}

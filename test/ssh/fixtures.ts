import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { newId } from '@anvil/shared';
import type Dockerode from 'dockerode';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/index.ts';
import { waitFor } from '../../control-plane/src/testing/wait.ts';
import { workloadSpecInput } from '../agent/fixtures.ts';
import { type RunningAgent, startAgent } from '../agent/harness.ts';
import { BUSYBOX_IMAGE, ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { removeTestContainers, TEST_LABEL } from '../fixtures/images/docker.ts';

export { waitFor };

export interface Keypair {
  path: string;
  pub: string;
}

/** An ed25519 key made by the real ssh-keygen, without a passphrase. */
export function keygen(dir: string, name: string, type = 'ed25519'): Keypair {
  const path = join(dir, name);
  execFileSync('ssh-keygen', ['-q', '-N', '', '-t', type, '-C', `${name}@test`, '-f', path]);
  return { path, pub: readFileSync(`${path}.pub`, 'utf8').trim() };
}

/** Options every OpenSSH tool gets: no host key prompts, no agent, no passwords. */
export function clientOptions(key: Keypair): string[] {
  return [
    '-i',
    key.path,
    '-o',
    'StrictHostKeyChecking=no',
    '-o',
    'UserKnownHostsFile=/dev/null',
    '-o',
    'BatchMode=yes',
    '-o',
    'IdentitiesOnly=yes',
    '-o',
    'IdentityAgent=none',
    '-o',
    'LogLevel=ERROR',
    '-F',
    '/dev/null',
  ];
}

export interface Run {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs a command to completion (stdin given or closed), killing it after `timeoutMs`. */
export function runTool(
  command: string,
  args: string[],
  stdin?: string | Buffer,
  timeoutMs = 120_000,
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') });
    });
    child.stdin.end(stdin);
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/**
 * A cluster row straight in the database (the clusters API places on GPUs and is tested elsewhere),
 * registered in the resource directory as owned by `ownerId`, and its workload (id = cluster id,
 * contract 1) run by the real agent on `hostId`: a busybox httpd on 8080 serving /www.
 */
export async function insertCluster(
  t: TestApp,
  options: { ownerId: string; accountId: string; hostId: string; sshEnabled?: boolean; status?: string },
): Promise<{ id: string }> {
  const id = newId('cluster');
  const name = `ssh-test-${id.slice(-6)}`;
  await t.context.db.prisma.cluster.create({
    data: {
      id,
      accountId: options.accountId,
      ownerId: options.ownerId,
      name,
      status: options.status ?? 'running',
      gpuType: 'H100',
      gpuCount: 1,
      cpuCores: 1,
      memoryGb: 1,
      storageGb: 1,
      dockerImage: BUSYBOX_IMAGE,
      command: [],
      sshEnabled: options.sshEnabled ?? true,
      hostId: options.hostId,
    },
  });
  await t.context.db.prisma.resource.create({
    data: { id, accountId: options.accountId, type: 'cluster', name, ownerId: options.ownerId },
  });
  await t.context.fleet.workloads.create({
    id,
    hostId: options.hostId,
    kind: 'cluster',
    ownerAccountId: options.accountId,
    spec: workloadSpecInput({
      image: BUSYBOX_IMAGE,
      command: [
        'sh',
        '-c',
        'mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www',
      ],
      env: { HOME: '/root' },
      labels: { [TEST_LABEL]: '1' },
    }),
  });
  await waitFor(
    `cluster ${id} running`,
    async () => {
      const view = await t.context.fleet.workloads.get(id);
      return view.phase === 'running' && view.actualStatus?.ipAddress ? view : null;
    },
    120_000,
  );
  return { id };
}

export interface SshWorld {
  t: TestApp;
  url: string;
  agent: RunningAgent;
  hostId: string;
  /** The relay's port. */
  port: number;
  close(): Promise<void>;
}

/**
 * The real path: the control plane (the app and context `npm start` builds) on loopback, a real agent
 * on real Docker, the SSH relay on a free port; sessions reach containers through the agent's tunnels.
 */
export async function startSshWorld(
  docker: Dockerode,
  dataDir: string,
  env: Record<string, string> = {},
): Promise<SshWorld> {
  await ensureBusyboxImage(docker);
  const t = await createTestApp({
    env: {
      ANVIL_DATA_DIR: dataDir,
      ANVIL_SSH_HOST: 'ssh.example.test',
      ANVIL_HEARTBEAT_SECONDS: '5',
      ANVIL_HOST_GRACE_SECONDS: '120',
      ...env,
    },
  });
  const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
  const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
  const agent = await startAgent(docker, { controlPlaneUrl: url, joinToken: value });
  const hostId = await waitFor('registration', async () => agent.agent.hostId, 120_000);
  await waitFor('agent connected', async () => t.context.fleet.agents.isConnectedHere(hostId), 120_000);
  const port = (await t.context.ssh.listen(0, '127.0.0.1')).port;
  return {
    t,
    url,
    agent,
    hostId,
    port,
    async close() {
      await agent.stop().catch(() => {});
      await t.close();
      await removeTestContainers(docker, `anvil.host=${hostId}`);
    },
  };
}

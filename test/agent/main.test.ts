import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBusyboxImage, TEST_HOST_IMAGES } from '../fixtures/images/busybox.ts';
import { dockerOrFail, removeTestContainers, testDocker } from '../fixtures/images/docker.ts';
import { FakeControlPlane } from './fake-control-plane.ts';
import { workloadSpec } from './fixtures.ts';
import { tempDir } from './harness.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

interface Daemon {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

/** The real daemon, as `npm run agent` starts it: a separate Node process. */
function spawnAgent(args: string[], env: Record<string, string> = {}): Daemon {
  const child = spawn(process.execPath, ['--import', 'tsx', 'agent/src/main.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, ANVIL_LOG_LEVEL: 'info', ANVIL_HOST_IMAGES: TEST_HOST_IMAGES.join(','), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout?.on('data', (d) => {
    out += d;
  });
  child.stderr?.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

describe.skipIf(!dockerOrFail('test/agent/main.test.ts'))('the agent daemon as a process', () => {
  let docker: Dockerode;
  let cp: FakeControlPlane;
  const hostIds: string[] = [];
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
    cp = await FakeControlPlane.start({ heartbeatSeconds: 1, metricsSeconds: 2 });
  });

  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await cp.close();
    for (const hostId of hostIds) await removeTestContainers(docker, `anvil.host=${hostId}`);
  });

  it('exits non-zero with one clear line when the join token is refused', async () => {
    const stateDir = await tempDir('anvil-main-bad-');
    const daemon = spawnAgent([
      '--control-plane',
      cp.url,
      '--join-token',
      'jt_bogus',
      '--state-dir',
      stateDir,
    ]);
    children.push(daemon.child);
    expect(await daemon.exited).toBe(1);
    expect(daemon.stderr()).toBe(
      'anvil-agent: join token refused by the control plane: join token is unknown, expired or used up (join_token_invalid)\n',
    );
    // The structured log says the same, as JSON.
    expect(daemon.stdout()).toContain('"level":60');
  });

  it('exits 2 with one line on a configuration error', async () => {
    const daemon = spawnAgent([], { ANVIL_CONTROL_PLANE: '' });
    expect(await daemon.exited).toBe(2);
    expect(daemon.stderr()).toBe(
      'anvil-agent: no control plane given: pass --control-plane <url> or set ANVIL_CONTROL_PLANE\n',
    );
  });

  it('honours DOCKER_HOST', async () => {
    const stateDir = await tempDir('anvil-main-dockerhost-');
    const daemon = spawnAgent(['--control-plane', cp.url, '--state-dir', stateDir], {
      ANVIL_JOIN_TOKEN: cp.createJoinToken(),
      DOCKER_HOST: 'unix:///nonexistent/docker.sock',
    });
    children.push(daemon.child);
    const hostId = await cp.waitFor('hello', () =>
      cp.hostIds().find((id) => !hostIds.includes(id) && cp.host(id).inventory !== null),
    );
    hostIds.push(hostId);
    expect(cp.host(hostId).inventory?.docker).toMatchObject({
      version: null,
      error: expect.stringContaining('/nonexistent/docker.sock'),
    });
    daemon.child.kill('SIGTERM');
    expect(await daemon.exited).toBe(0);
  });

  it('survives kill -9: restarted from env and its saved credential, it adopts the same container', async () => {
    const stateDir = await tempDir('anvil-main-state-');
    const env = { ANVIL_STATE_DIR: stateDir, ANVIL_SIMULATE_GPUS: '1xH100' };
    const first = spawnAgent(['--control-plane', cp.url], { ...env, ANVIL_JOIN_TOKEN: cp.createJoinToken() });
    children.push(first.child);
    const hostId = await cp.waitFor('registration', () =>
      cp.hostIds().find((id) => !hostIds.includes(id) && cp.host(id).connected),
    );
    hostIds.push(hostId);
    expect(cp.host(hostId).inventory?.gpus.simulated).toBe(true);
    expect(first.stdout()).toContain('GPU INVENTORY IS SIMULATED');

    const spec = workloadSpec(`main-${hostId.slice(-8)}`, {
      restartPolicy: { name: 'unless-stopped', maxRetries: 0 },
    });
    await cp.setDesired(hostId, [spec]);
    const running = await cp.waitFor('running', () =>
      cp
        .messages('actual_state', hostId)
        .flatMap((m) => m.workloads)
        .find((w) => w.phase === 'running'),
    );

    first.child.kill('SIGKILL');
    await first.exited;
    await cp.waitFor('disconnect', () => !cp.host(hostId).connected);
    expect((await docker.getContainer(running.containerId!).inspect()).State.Running).toBe(true);

    const before = cp.messages('actual_state', hostId).length;
    const second = spawnAgent(['--control-plane', cp.url], env);
    children.push(second.child);
    const adopted = await cp.waitFor('adopted', () =>
      cp
        .messages('actual_state', hostId)
        .slice(before)
        .flatMap((m) => m.workloads)
        .find((w) => w.phase === 'running'),
    );
    expect(adopted.containerId).toBe(running.containerId);
    const list = await docker.listContainers({ all: true, filters: { label: [`anvil.host=${hostId}`] } });
    expect(list).toHaveLength(1);

    // SIGTERM stops the agent cleanly (exit 0) and leaves the workload running.
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    expect((await docker.getContainer(running.containerId!).inspect()).State.Running).toBe(true);
  });
});

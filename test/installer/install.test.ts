import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { copyFile, mkdir, readdir, readFile, stat, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../control-plane/src/testing/process.ts';
import { FakeControlPlane } from '../agent/fake-control-plane.ts';
import { tempDir } from '../agent/harness.ts';

const SCRIPT = join(REPO_ROOT, 'installer', 'install.sh');

function install(args: string[], env: Record<string, string> = {}) {
  const run = spawnSync('bash', [SCRIPT, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ANVIL_JOIN_TOKEN: '', ...env },
  });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

function mode(path: string) {
  return stat(path).then((s) => s.mode & 0o777);
}

describe('installer/install.sh', () => {
  let cp: FakeControlPlane;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    cp = await FakeControlPlane.start({ heartbeatSeconds: 1, metricsSeconds: 5 });
  });

  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await cp.close();
  });

  it('is valid bash', () => {
    expect(spawnSync('bash', ['-n', SCRIPT]).status).toBe(0);
  });

  it.each([
    [[], '--control-plane <url> is required'],
    [['--control-plane', 'ftp://x'], '--control-plane must be an http(s):// or ws(s):// URL'],
    [['--control-plane', 'http://cp', '--prefix', 'relative'], 'paths must be absolute'],
    [['--control-plane', 'http://cp', '--simulate-gpus', 'lots'], '--simulate-gpus must look like 2xH100'],
    [['--control-plane', 'http://cp', '--bogus'], 'unknown option: --bogus'],
    [['--control-plane', 'http://cp', '--source', '/nonexistent'], 'is not an Anvil checkout'],
  ])('refuses %j with one clear line and writes nothing', async (args, message) => {
    const root = await tempDir('anvil-install-bad-');
    const result = install([...args, '--root', root]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(message);
    expect(await readdir(root)).toEqual([]);
  });

  it('asks for a join token on a first install', async () => {
    const root = await tempDir('anvil-install-notoken-');
    const result = install(['--control-plane', 'http://cp', '--root', root]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('--join-token is required for a first install');
  });

  it('stages the agent, a private env file and a systemd unit; the installed agent registers', async () => {
    const work = await tempDir('anvil-install-');
    const root = join(work, 'root');
    const stateDir = join(work, 'state');
    const token = cp.createJoinToken();
    // --skip-npm: the prefix must hold the dependencies (the installer builds the agent with them). Link
    // this checkout's, except the workspace packages, which will be the staged copies.
    const prefix = join(root, 'opt/anvil-agent');
    const modules = join(prefix, 'node_modules');
    await mkdir(join(modules, '@anvil'), { recursive: true });
    for (const entry of await readdir(join(REPO_ROOT, 'node_modules'))) {
      if (entry === '@anvil' || entry === '.bin') continue;
      await symlink(join(REPO_ROOT, 'node_modules', entry), join(modules, entry));
    }
    await symlink(join(prefix, 'shared'), join(modules, '@anvil/shared'));
    const result = install([
      '--control-plane',
      cp.url,
      '--root',
      root,
      '--state-dir',
      stateDir,
      '--simulate-gpus',
      '1xH100',
      '--skip-npm',
      '--join-token',
      token,
    ]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);

    expect((await stat(join(prefix, 'agent/src/main.ts'))).isFile()).toBe(true);
    expect((await stat(join(prefix, 'agent/dist/main.js'))).isFile()).toBe(true);
    expect((await stat(join(prefix, 'shared/src/protocol/index.ts'))).isFile()).toBe(true);
    const installed = await readdir(join(prefix, 'agent/src'), { recursive: true });
    expect(installed.filter((f) => f.endsWith('.test.ts'))).toEqual([]);

    const envFile = join(root, 'etc/anvil/agent.env');
    expect(await mode(envFile)).toBe(0o600);
    const env = Object.fromEntries(
      (await readFile(envFile, 'utf8'))
        .split('\n')
        .filter((line) => line && !line.startsWith('#'))
        .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
    );
    expect(env).toEqual({
      ANVIL_CONTROL_PLANE: cp.url,
      ANVIL_STATE_DIR: stateDir,
      ANVIL_JOIN_TOKEN: token,
      ANVIL_SIMULATE_GPUS: '1xH100',
    });
    expect(await mode(join(root, stateDir))).toBe(0o700);

    const unit = await readFile(join(root, 'etc/systemd/system/anvil-agent.service'), 'utf8');
    expect(unit).toContain('EnvironmentFile=/etc/anvil/agent.env');
    // Plain JavaScript: no TypeScript loader in the running service.
    expect(unit).toContain(`ExecStart=${process.execPath} /opt/anvil-agent/agent/dist/main.js`);
    expect(unit).toContain('RestartPreventExitStatus=1 2');
    expect(unit).toContain('Requires=docker.service');

    // Run the staged agent as the unit would (its env file, its working directory).
    const agent = spawn(process.execPath, [join(prefix, 'agent/dist/main.js')], {
      cwd: prefix,
      env: { PATH: process.env['PATH'] ?? '', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.push(agent);
    const hostId = await cp.waitFor('registration', () =>
      cp.hostIds().find((id) => cp.host(id).connected && cp.host(id).inventory !== null),
    );
    expect(cp.host(hostId).inventory?.gpus.simulated).toBe(true);
    expect(await mode(join(stateDir, 'credential.json'))).toBe(0o600);
    agent.kill('SIGTERM');
    expect(await new Promise((resolve) => agent.on('exit', resolve))).toBe(0);

    // Re-installing over a registered agent needs no token, and none is written.
    await copyFile(join(stateDir, 'credential.json'), join(root, stateDir, 'credential.json'));
    const again = install(['--control-plane', cp.url, '--root', root, '--state-dir', stateDir, '--skip-npm']);
    expect(again.code).toBe(0);
    expect(await readFile(envFile, 'utf8')).not.toContain('ANVIL_JOIN_TOKEN');
  });
});

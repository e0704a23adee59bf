import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, readlink, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../control-plane/src/testing/process.ts';
import { tempDir } from '../agent/harness.ts';

const SCRIPT = join(REPO_ROOT, 'installer', 'install.sh');
const ARCH = process.arch === 'arm64' ? 'arm64' : 'x64';

/**
 * install.sh under dash, as `curl … | sh` runs it on Debian and Ubuntu. Asynchronous: the artifact server
 * it downloads from runs in this process.
 */
function install(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('dash', [SCRIPT, ...args], { env: { PATH: process.env['PATH'] ?? '' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function mode(path: string) {
  return stat(path).then((s) => s.mode & 0o777);
}

/** A small artifact of `version` (VERSION and a stand-in runtime), tar.gz, as the control plane serves them. */
async function fakeArtifact(version: string): Promise<Buffer> {
  const dir = await tempDir('anvil-install-artifact-');
  await mkdir(join(dir, 'src/bin'), { recursive: true });
  await writeFile(join(dir, 'src/VERSION'), `${version}\n`);
  await writeFile(join(dir, 'src/bin/node'), '#!/bin/sh\n', { mode: 0o755 });
  const out = join(dir, 'a.tar.gz');
  expect(spawnSync('tar', ['-czf', out, '-C', join(dir, 'src'), '.']).status).toBe(0);
  return readFile(out);
}

/**
 * install.sh's own behaviour against a loopback server playing the control plane's artifact routes:
 * what it refuses, that it checks the SHA-256 before unpacking anything, and what it writes. The real
 * control plane, artifact and a fresh Debian are in self-install.e2e.test.ts.
 */
describe('installer/install.sh', () => {
  let server: Server;
  let url: string;
  const files = new Map<string, Buffer | string>();

  beforeAll(async () => {
    server = createServer((req, res) => {
      const body = files.get(req.url ?? '');
      res.writeHead(body === undefined ? 404 : 200).end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const good = await fakeArtifact('1.2.3');
    const name = `anvil-agent-1.2.3-linux-${ARCH}.tar.gz`;
    files.set(`/agent/artifacts/1.2.3/${name}`, good);
    files.set(
      `/agent/artifacts/1.2.3/${name}.sha256`,
      `${createHash('sha256').update(good).digest('hex')}  ${name}\n`,
    );
    // Version 6.6.6 is served with a SHA-256 file that does not match its bytes.
    const bad = `anvil-agent-6.6.6-linux-${ARCH}.tar.gz`;
    files.set(`/agent/artifacts/6.6.6/${bad}`, await fakeArtifact('6.6.6'));
    files.set(`/agent/artifacts/6.6.6/${bad}.sha256`, `${'0'.repeat(64)}  ${bad}\n`);
  });

  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('is valid POSIX sh', () => {
    expect(spawnSync('dash', ['-n', SCRIPT]).status).toBe(0);
  });

  it.each([
    [[], '--control-plane <url> is required'],
    [
      ['--control-plane', 'ftp://x', '--version', '1'],
      '--control-plane must be an http(s):// or ws(s):// URL',
    ],
    [['--control-plane', 'http://cp'], '--version <version> is required'],
    [['--control-plane', 'http://cp', '--version', '1;rm'], '--version looks wrong'],
    [['--control-plane', 'http://cp', '--version', '1', '--prefix', 'relative'], 'paths must be absolute'],
    [
      ['--control-plane', 'http://cp', '--version', '1', '--simulate-gpus', 'lots'],
      '--simulate-gpus must look like 2xH100',
    ],
    [['--control-plane', 'http://cp', '--version', '1', '--join-token', 'a b'], '--join-token looks wrong'],
    [['--control-plane', 'http://cp', '--bogus'], 'unknown option: --bogus'],
    [['--control-plane', 'http://cp', '--version', '1'], '--join-token is required for a first install'],
  ])('refuses %j with one clear line and writes nothing', async (args, message) => {
    const root = await tempDir('anvil-install-bad-');
    const result = await install([...args, '--root', root]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(message);
    expect(await readdir(root)).toEqual([]);
  });

  it('refuses an artifact whose SHA-256 does not match, and unpacks nothing', async () => {
    const root = await tempDir('anvil-install-sha-');
    const result = await install([
      '--control-plane',
      url,
      '--version',
      '6.6.6',
      '--join-token',
      'anvjt_x',
      '--root',
      root,
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('SHA-256 of anvil-agent-6.6.6');
    expect(await readdir(join(root, 'opt/anvil-agent/versions'))).toEqual([]);
    await expect(stat(join(root, 'opt/anvil-agent/current'))).rejects.toThrow();
  });

  it('unpacks the artifact into its version directory, links current, writes a private env file and the unit', async () => {
    const root = await tempDir('anvil-install-');
    const result = await install([
      '--control-plane',
      url,
      '--version',
      '1.2.3',
      '--join-token',
      'anvjt_abc',
      '--simulate-gpus',
      '1xH100',
      '--root',
      root,
    ]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const prefix = join(root, 'opt/anvil-agent');
    expect(await readlink(join(prefix, 'current'))).toBe('versions/1.2.3');
    expect((await readFile(join(prefix, 'current/VERSION'), 'utf8')).trim()).toBe('1.2.3');
    expect(await mode(join(prefix, 'current/bin/node'))).toBe(0o755);
    expect((await readdir(join(prefix, 'versions'))).sort()).toEqual(['1.2.3']);

    const envFile = join(root, 'etc/anvil/agent.env');
    expect(await mode(envFile)).toBe(0o600);
    const env = (await readFile(envFile, 'utf8')).split('\n').filter((l) => l && !l.startsWith('#'));
    expect(env).toEqual([
      `ANVIL_CONTROL_PLANE=${url}`,
      'ANVIL_STATE_DIR=/var/lib/anvil-agent',
      'ANVIL_INSTALL_DIR=/opt/anvil-agent',
      'ANVIL_JOIN_TOKEN=anvjt_abc',
      'ANVIL_SIMULATE_GPUS=1xH100',
    ]);
    expect(await mode(join(root, 'var/lib/anvil-agent'))).toBe(0o700);
    const unit = await readFile(join(root, 'etc/systemd/system/anvil-agent.service'), 'utf8');
    expect(unit).toContain(
      'ExecStart=/opt/anvil-agent/current/bin/node /opt/anvil-agent/current/lib/agent.mjs',
    );
    expect(unit).toContain('Restart=always');
    expect(unit).toContain('RestartPreventExitStatus=1 2');
    expect(unit).toContain('KillMode=process');

    // Re-installing over a registered agent needs no token, and none is written.
    await writeFile(join(root, 'var/lib/anvil-agent/credential.json'), '{}');
    const again = await install(['--control-plane', url, '--version', '1.2.3', '--root', root]);
    expect(again.code).toBe(0);
    expect(await readFile(envFile, 'utf8')).not.toContain('ANVIL_JOIN_TOKEN');
  });
});

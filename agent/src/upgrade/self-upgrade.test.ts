import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, readlink, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { artifactUrl, createSelfUpgrader } from './self-upgrade.ts';

async function tarball(version: string): Promise<Buffer> {
  const dir = await mkdtemp(join(tmpdir(), 'anvil-upgrade-src-'));
  await mkdir(join(dir, 'bin'));
  await writeFile(join(dir, 'VERSION'), `${version}\n`);
  await writeFile(join(dir, 'bin/node'), '#!/bin/sh\n', { mode: 0o755 });
  return execFileSync('tar', ['-czf', '-', '-C', dir, '.']);
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('the agent upgrading itself', () => {
  let install: string;
  let served: Map<string, Buffer>;
  const fetch = (async (url: string) => {
    const body = served.get(new URL(url).pathname);
    return body ? new Response(body) : new Response('no', { status: 404 });
  }) as typeof globalThis.fetch;

  beforeEach(async () => {
    install = await mkdtemp(join(tmpdir(), 'anvil-upgrade-'));
    await mkdir(join(install, 'versions/1.0.0'), { recursive: true });
    await mkdir(join(install, 'versions/0.9.0'), { recursive: true });
    await symlink('versions/1.0.0', join(install, 'current'));
    served = new Map();
  });

  const upgrader = () =>
    createSelfUpgrader({
      installDir: install,
      controlPlaneUrl: 'wss://cp.example.com',
      currentVersion: '1.0.0',
      fetch,
    });

  it('fetches from the control plane over http(s), whatever scheme the agent dials', () => {
    expect(artifactUrl('wss://cp.example.com:8443/', '/agent/artifacts/2.0.0/a.tar.gz')).toBe(
      'https://cp.example.com:8443/agent/artifacts/2.0.0/a.tar.gz',
    );
    expect(artifactUrl('http://127.0.0.1:9', '/agent/artifacts/x')).toBe(
      'http://127.0.0.1:9/agent/artifacts/x',
    );
  });

  it('unpacks a verified artifact into its own directory, then switches current; older versions go', async () => {
    const body = await tarball('2.0.0');
    served.set('/agent/artifacts/2.0.0/a.tar.gz', body);
    const result = await upgrader().stage({
      name: 'upgrade_agent',
      version: '2.0.0',
      path: '/agent/artifacts/2.0.0/a.tar.gz',
      sha256: sha(body),
      sizeBytes: body.length,
    });
    expect(result).toEqual({ version: '2.0.0', previous: '1.0.0', installDir: install });
    expect(await readlink(join(install, 'current'))).toBe('versions/2.0.0');
    expect((await readFile(join(install, 'current/VERSION'), 'utf8')).trim()).toBe('2.0.0');
    // The running version stays (to go back by hand), older ones and every temporary file are gone.
    expect((await readdir(join(install, 'versions'))).sort()).toEqual(['1.0.0', '2.0.0']);
  });

  it.each([
    [
      'a SHA-256 that does not match',
      (b: Buffer) => ({ sha256: '0'.repeat(64), sizeBytes: b.length }),
      'does not match',
    ],
    [
      'more bytes than announced',
      (b: Buffer) => ({ sha256: sha(b), sizeBytes: b.length - 1 }),
      'larger than',
    ],
  ])('refuses %s and leaves current alone', async (_what, announce, message) => {
    const body = await tarball('2.0.0');
    served.set('/agent/artifacts/2.0.0/a.tar.gz', body);
    await expect(
      upgrader().stage({
        name: 'upgrade_agent',
        version: '2.0.0',
        path: '/agent/artifacts/2.0.0/a.tar.gz',
        ...announce(body),
      }),
    ).rejects.toThrow(message);
    expect(await readlink(join(install, 'current'))).toBe('versions/1.0.0');
    expect((await readdir(join(install, 'versions'))).sort()).toEqual(['0.9.0', '1.0.0']);
  });

  it('refuses an artifact that says it is another version', async () => {
    const body = await tarball('6.6.6');
    served.set('/agent/artifacts/2.0.0/a.tar.gz', body);
    await expect(
      upgrader().stage({
        name: 'upgrade_agent',
        version: '2.0.0',
        path: '/agent/artifacts/2.0.0/a.tar.gz',
        sha256: sha(body),
        sizeBytes: body.length,
      }),
    ).rejects.toThrow('the artifact says it is version "6.6.6", not 2.0.0');
    expect(await readlink(join(install, 'current'))).toBe('versions/1.0.0');
  });
});

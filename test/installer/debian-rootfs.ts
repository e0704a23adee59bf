import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type Dockerode from 'dockerode';

const run = promisify(execFile);

/** The Debian release a stock GPU server runs, and what it gets beyond minbase: curl to fetch install.sh. */
const SUITE = 'bookworm';
const INCLUDE = 'curl,ca-certificates';
const REPOSITORY = 'anvil-test/debian12-minbase';

/** Cached tarballs live here between runs (CI builds the root filesystem once a day). */
export function cacheDir(): string {
  return process.env['ANVIL_TEST_CACHE_DIR'] ?? join(tmpdir(), 'anvil-test-cache');
}

function today(): string {
  return new Date().toISOString().slice(0, 10).replaceAll('-', '');
}

async function imageExists(docker: Dockerode, ref: string): Promise<boolean> {
  try {
    await docker.getImage(ref).inspect();
    return true;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return false;
    throw err;
  }
}

/**
 * Whether the Debian image can be had: debootstrap is installed, or today's tarball is cached. Without
 * either the test skips with a line on stderr, except under ANVIL_REQUIRE_DOCKER=1 (CI), where it fails.
 */
export function debianImageOrFail(): boolean {
  const cached = existsSync(join(cacheDir(), `debian12-minbase-${today()}.tar`));
  if (cached || ['/usr/sbin/debootstrap', '/usr/bin/debootstrap'].some((p) => existsSync(p))) return true;
  const message = 'self-install test: debootstrap is not installed (apt-get install debootstrap)';
  if (process.env['ANVIL_REQUIRE_DOCKER'] === '1') throw new Error(`ANVIL_REQUIRE_DOCKER=1 but ${message}`);
  process.stderr.write(`SKIPPED ${message}\n`);
  return false;
}

function debootstrapBinary(): string {
  const found = ['/usr/sbin/debootstrap', '/usr/bin/debootstrap'].find((p) => existsSync(p));
  if (!found) throw new Error('debootstrap is not installed: apt-get install debootstrap (.ci/run does)');
  return found;
}

/** debootstrap --variant=minbase into a temporary directory, packed into `tarball` (built aside, renamed). */
async function buildTarball(tarball: string): Promise<void> {
  const work = join(cacheDir(), `.debootstrap-${process.pid}`);
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  const rootfs = join(work, 'rootfs');
  const mirror = process.env['ANVIL_TEST_DEBIAN_MIRROR'] ?? 'http://deb.debian.org/debian';
  try {
    await new Promise<void>((resolve, reject) => {
      const child = spawn(
        debootstrapBinary(),
        ['--variant=minbase', `--include=${INCLUDE}`, SUITE, rootfs, mirror],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let err = '';
      child.stderr.on('data', (d: Buffer) => {
        err = (err + d.toString()).slice(-4000);
      });
      child.on('error', reject);
      child.on('exit', (code) =>
        code === 0 ? resolve() : reject(new Error(`debootstrap exited ${code}: ${err}`)),
      );
    });
    // The image is a fresh server: no apt lists or package cache from the build.
    await rm(join(rootfs, 'var/cache/apt/archives'), { recursive: true, force: true });
    await run('tar', ['-C', rootfs, '-cf', `${tarball}.partial`, '.'], { maxBuffer: 1 << 20 });
    await rename(`${tarball}.partial`, tarball);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * A Docker image of a fresh Debian 12 root filesystem (minbase, plus curl and ca-certificates; no
 * Node.js), made with debootstrap from Debian's packages and `docker import`. COST: the first run of the
 * day downloads about 60 MB from the Debian mirror and takes minutes (about 6 on a loaded 2-core
 * machine); the tarball is cached in cacheDir() by date and the image tagged by date, so later runs
 * take seconds. Older days' tarballs and images are removed.
 */
export async function debianImage(docker: Dockerode): Promise<string> {
  const date = today();
  const ref = `${REPOSITORY}:${date}`;
  if (await imageExists(docker, ref)) return ref;
  await mkdir(cacheDir(), { recursive: true });
  const tarball = join(cacheDir(), `debian12-minbase-${date}.tar`);
  for (const name of await readdir(cacheDir())) {
    if (name.startsWith('debian12-minbase-') && !name.startsWith(`debian12-minbase-${date}`)) {
      await rm(join(cacheDir(), name), { force: true });
    }
  }
  if (!existsSync(tarball)) await buildTarball(tarball);
  await run('docker', ['import', '--change', 'LABEL anvil.test=1', tarball, ref], { maxBuffer: 1 << 20 });
  const old = await docker.listImages({ filters: { reference: [REPOSITORY] } });
  for (const image of old) {
    if (!(image.RepoTags ?? []).includes(ref))
      await docker
        .getImage(image.Id)
        .remove()
        .catch(() => {});
  }
  return ref;
}

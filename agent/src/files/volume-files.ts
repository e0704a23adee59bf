import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { type FileHandle, lstat, open, readdir, readlink, realpath, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { type FileStat, isVolumePath } from '@anvil/shared/protocol';
import { volumeDir } from '../docker/container-config.ts';

/** Digests kept (by inode, size and modification time); older ones are hashed again when asked. */
const MAX_DIGESTS = 1_000;

/** A path that leaves the workload's volume, or a workload that has no volume on this host. */
export class VolumeFileRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VolumeFileRefused';
  }
}

/** An open regular file of a volume: read its bytes with `stream`, then `close`. */
export interface OpenVolumeFile {
  sizeBytes: number;
  sha256: string | null;
  stream(offset: number, length: number | null): Readable;
  close(): Promise<void>;
}

/**
 * Files in workloads' volumes (training artifacts and checkpoints), for the control plane's `stat_file`,
 * `delete_file` and file tunnels. Only workloads with a volume directory on this host are served, and a
 * path is served only when the file it names really lies inside that directory: the last component is
 * opened with O_NOFOLLOW and the opened descriptor's real path (/proc/self/fd) is checked, so neither a
 * symlink nor a directory swapped behind our back leads out. Digests are computed once per file content.
 */
export class VolumeFiles {
  readonly #digests = new Map<string, string>();

  constructor(private readonly volumeRoot: string) {}

  /** The real path of the workload's volume directory; refused when it has none on this host. */
  async #root(workloadId: string): Promise<string> {
    const dir = volumeDir(this.volumeRoot, workloadId);
    const real = await realpath(dir).catch(() => null);
    if (!real || !(await stat(real)).isDirectory()) {
      throw new VolumeFileRefused(`workload ${workloadId} has no volume on this host`);
    }
    return real;
  }

  /** The real path `path` resolves to, or null when it leaves the volume; `missing` when nothing is there. */
  async #resolve(root: string, path: string): Promise<string | null | 'missing'> {
    if (!isVolumePath(path)) throw new VolumeFileRefused(`path ${JSON.stringify(path)} is not a volume path`);
    const real = await realpath(join(root, path)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return 'missing' as const;
      throw error;
    });
    if (real === 'missing') return real;
    return inside(root, real) ? real : null;
  }

  async stat(workloadId: string, path: string, hash: boolean): Promise<FileStat> {
    const root = await this.#root(workloadId);
    const real = await this.#resolve(root, path);
    if (real === null) return { kind: 'outside', sizeBytes: 0, modifiedAt: null, sha256: null };
    if (real === 'missing') return { kind: 'missing', sizeBytes: 0, modifiedAt: null, sha256: null };
    const info = await lstat(real);
    if (info.isDirectory()) {
      return {
        kind: 'directory',
        sizeBytes: await treeBytes(real),
        modifiedAt: info.mtimeMs | 0,
        sha256: null,
      };
    }
    const file = await this.open(workloadId, path, hash);
    await file.close();
    return { kind: 'file', sizeBytes: file.sizeBytes, modifiedAt: info.mtimeMs | 0, sha256: file.sha256 };
  }

  /**
   * Opens a regular file of the volume. With `hash`, its SHA-256 (from the cache when the inode, size and
   * modification time are those last hashed). Refused outside the volume or for anything but a file.
   */
  async open(workloadId: string, path: string, hash: boolean): Promise<OpenVolumeFile> {
    const root = await this.#root(workloadId);
    const real = await this.#resolve(root, path);
    if (real === null) throw new VolumeFileRefused(`${path} leaves the workload's volume`);
    if (real === 'missing') throw new VolumeFileRefused(`${path} does not exist in the workload's volume`);
    // O_NONBLOCK: a FIFO the container left there must not hang the agent.
    const handle = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      const opened = await readlink(`/proc/self/fd/${handle.fd}`);
      if (!inside(root, opened)) throw new VolumeFileRefused(`${path} leaves the workload's volume`);
      const info = await handle.stat();
      if (!info.isFile()) throw new VolumeFileRefused(`${path} is not a regular file`);
      const key = `${info.dev}:${info.ino}:${info.size}:${info.mtimeMs}:${info.ctimeMs}`;
      let sha256 = this.#digests.get(key) ?? null;
      if (hash && sha256 === null) {
        sha256 = await digest(handle, info.size);
        this.#digests.set(key, sha256);
        if (this.#digests.size > MAX_DIGESTS) this.#digests.delete(this.#digests.keys().next().value!);
      }
      return {
        sizeBytes: info.size,
        sha256,
        stream: (offset, length) =>
          handle.createReadStream({
            start: offset,
            ...(length === null ? {} : { end: offset + length - 1 }),
            autoClose: false,
          }),
        close: () => handle.close(),
      };
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /**
   * Deletes a file or a directory tree of the volume: the path's parent must resolve inside the volume, and
   * the last component is removed as it is (a symlink is removed, never followed). Answers what it freed.
   */
  async remove(workloadId: string, path: string): Promise<{ removed: boolean; sizeBytes: number }> {
    const root = await this.#root(workloadId);
    if (!isVolumePath(path)) throw new VolumeFileRefused(`path ${JSON.stringify(path)} is not a volume path`);
    let parentReal = root;
    if (dirname(path) !== '.') {
      const parent = await this.#resolve(root, dirname(path));
      if (parent === 'missing') return { removed: false, sizeBytes: 0 };
      if (parent === null) throw new VolumeFileRefused(`${path} leaves the workload's volume`);
      parentReal = parent;
    }
    const target = join(parentReal, basename(path));
    const info = await lstat(target).catch(() => null);
    if (!info) return { removed: false, sizeBytes: 0 };
    const sizeBytes = info.isDirectory() ? await treeBytes(target) : info.isFile() ? info.size : 0;
    await rm(target, { recursive: true, force: true });
    return { removed: true, sizeBytes };
  }
}

function inside(root: string, real: string): boolean {
  return real.startsWith(root.endsWith(sep) ? root : `${root}${sep}`);
}

async function digest(handle: FileHandle, size: number): Promise<string> {
  const hash = createHash('sha256');
  if (size > 0) {
    for await (const chunk of handle.createReadStream({ start: 0, autoClose: false })) hash.update(chunk);
  }
  return hash.digest('hex');
}

/** Bytes of the regular files under a directory; symlinks are not followed (nor counted). */
async function treeBytes(dir: string): Promise<number> {
  let total = 0;
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += await treeBytes(path);
    else if (entry.isFile()) total += (await lstat(path).catch(() => ({ size: 0 }))).size;
  }
  return total;
}

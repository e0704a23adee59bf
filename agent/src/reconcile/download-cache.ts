import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { WorkloadDownload } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { errorMessage } from '../errors.ts';

/** GETs a control-plane path with the host's credential; resolves with the response once its head arrived. */
export type DownloadRequester = (path: string) => Promise<IncomingMessage>;

export type DownloadState = { kind: 'fetching' } | { kind: 'failed'; error: string; retryAt: number };

/** Where a digest's bytes live in the cache (the file the container's bind mount names). */
export function downloadPath(root: string, sha256: string): string {
  return join(root, sha256);
}

/**
 * A workload's downloads (WorkloadDownload), fetched in the background like image pulls, one fetch per
 * digest however many workloads want it. Bytes go to a temporary file, hashed on the way; only a file
 * of the announced size and SHA-256 is renamed to its digest, read-only, so a cut or tampered transfer
 * never reaches a container. A failure is remembered until `retryMs` has passed.
 */
export class DownloadCache {
  readonly #states = new Map<string, DownloadState>();
  readonly #ready = new Set<string>();

  constructor(
    private readonly root: string,
    private readonly options: {
      request: DownloadRequester | null;
      clock: Clock;
      logger: Logger;
      retryMs: number;
      onSettled: () => void;
    },
  ) {}

  /** null once every download is in the cache; otherwise the first one still fetching or failed. */
  async pending(downloads: readonly WorkloadDownload[]): Promise<DownloadState | null> {
    for (const download of downloads) {
      if (await this.#present(download)) continue;
      const state = this.#state(download.sha256);
      return state ?? { kind: 'fetching' };
    }
    return null;
  }

  /** Starts fetching what is neither cached, nor being fetched, nor waiting out a failure. */
  start(downloads: readonly WorkloadDownload[], workloadId: string): void {
    for (const download of downloads) {
      if (this.#ready.has(download.sha256) || this.#state(download.sha256)) continue;
      this.#states.set(download.sha256, { kind: 'fetching' });
      this.#fetch(download).then(
        () => {
          this.#states.delete(download.sha256);
          this.#ready.add(download.sha256);
          this.options.logger.info(
            { workloadId, path: download.path, bytes: download.sizeBytes },
            'downloaded',
          );
          this.options.onSettled();
        },
        (err: unknown) => {
          const error = `download ${download.path}: ${errorMessage(err)}`;
          this.#states.set(download.sha256, {
            kind: 'failed',
            error,
            retryAt: this.options.clock.now() + this.options.retryMs,
          });
          this.options.logger.warn({ workloadId, error }, 'download failed');
          this.options.onSettled();
        },
      );
    }
  }

  /** Removes cached files no desired workload names (and leftovers of interrupted transfers). */
  async prune(wanted: ReadonlySet<string>): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.root);
    } catch {
      return;
    }
    for (const name of names) {
      if (wanted.has(name) || this.#states.get(name.replace(/^\.|\.partial$/g, ''))?.kind === 'fetching')
        continue;
      this.#ready.delete(name);
      await rm(join(this.root, name), { force: true }).catch(() => {});
    }
  }

  #state(sha256: string): DownloadState | null {
    const state = this.#states.get(sha256);
    if (state?.kind === 'failed' && this.options.clock.now() >= state.retryAt) {
      this.#states.delete(sha256);
      return null;
    }
    return state ?? null;
  }

  async #present(download: WorkloadDownload): Promise<boolean> {
    if (this.#ready.has(download.sha256)) return true;
    // Left by an earlier run of the agent: only ever renamed into place once verified.
    const found = await stat(downloadPath(this.root, download.sha256)).catch(() => null);
    if (found?.isFile() && found.size === download.sizeBytes) {
      this.#ready.add(download.sha256);
      return true;
    }
    return false;
  }

  async #fetch(download: WorkloadDownload): Promise<void> {
    const request = this.options.request;
    if (!request) throw new Error('this agent has no control-plane session to download from');
    await mkdir(this.root, { recursive: true, mode: 0o755 });
    const partial = join(this.root, `.${download.sha256}.partial`);
    const response = await request(download.path);
    if (response.statusCode !== 200) {
      response.resume();
      throw new Error(`the control plane answered HTTP ${response.statusCode}`);
    }
    const hash = createHash('sha256');
    let bytes = 0;
    const count = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        bytes += chunk.length;
        if (bytes > download.sizeBytes)
          return done(new Error(`more than the ${download.sizeBytes} bytes announced`));
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(response, count, createWriteStream(partial, { mode: 0o444 }));
      if (bytes !== download.sizeBytes)
        throw new Error(`${bytes} bytes arrived, ${download.sizeBytes} announced`);
      const digest = hash.digest('hex');
      if (digest !== download.sha256) throw new Error(`SHA-256 ${digest} does not match ${download.sha256}`);
      await chmod(partial, 0o444);
      await rename(partial, downloadPath(this.root, download.sha256));
    } catch (err) {
      await rm(partial, { force: true }).catch(() => {});
      throw err;
    }
  }
}

/**
 * The agent upgrading itself in an install made by install.sh:
 *
 *   <installDir>/versions/<version>/   one unpacked artifact each (bin/node, lib/agent.mjs, ...)
 *   <installDir>/current -> versions/<version>   what systemd runs (ExecStart goes through it)
 *
 * A new version is downloaded beside the running one, checked against the SHA-256 the control plane
 * sent, unpacked into its own directory, and only then is `current` switched, by renaming a new link
 * over it (atomic: systemd starts either the old or the new version, never half of one). The agent then
 * exits and systemd (Restart=always) starts the new one. Containers are Docker's: nothing here touches
 * them, and the new agent reconciles what runs when it starts.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, readlink, rename, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { CommandBody } from '@anvil/shared/protocol';

export type UpgradeAgentCommand = Extract<CommandBody, { name: 'upgrade_agent' }>;

export interface UpgradeResult {
  version: string;
  previous: string;
  installDir: string;
}

export interface SelfUpgrader {
  /** Downloads, verifies and unpacks `command.version`, then points `current` at it. */
  stage(command: UpgradeAgentCommand): Promise<UpgradeResult>;
}

export interface SelfUpgraderOptions {
  installDir: string;
  /** The control plane's URL as configured (http(s) or ws(s)): artifacts are fetched from its host. */
  controlPlaneUrl: string;
  /** The version running now. */
  currentVersion: string;
  fetch?: typeof globalThis.fetch;
  /** Unpacks a .tar.gz into a directory (the system's tar by default). */
  untar?: (archive: string, into: string) => Promise<void>;
}

/** The artifact's URL on the control plane (ws(s):// configured URLs become http(s)://). */
export function artifactUrl(controlPlaneUrl: string, path: string): string {
  const url = new URL(controlPlaneUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : url.protocol === 'ws:' ? 'http:' : url.protocol;
  return new URL(path, url.origin).toString();
}

function systemUntar(archive: string, into: string): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile('tar', ['-xzf', archive, '-C', into, '--no-same-owner'], (err, _out, stderr) =>
      err ? reject(new Error(`unpacking the artifact failed: ${stderr.trim() || err.message}`)) : resolve(),
    ),
  );
}

export function createSelfUpgrader(options: SelfUpgraderOptions): SelfUpgrader {
  const fetchImpl = options.fetch ?? globalThis.fetch;
  const untar = options.untar ?? systemUntar;
  const versions = join(options.installDir, 'versions');
  let inProgress: Promise<UpgradeResult> | null = null;

  async function download(command: UpgradeAgentCommand, into: string): Promise<void> {
    const url = artifactUrl(options.controlPlaneUrl, command.path);
    const response = await fetchImpl(url);
    if (!response.ok || !response.body) throw new Error(`downloading ${url} failed: HTTP ${response.status}`);
    const hash = createHash('sha256');
    let bytes = 0;
    const measure = new Transform({
      transform(chunk: Buffer, _enc, done) {
        bytes += chunk.length;
        if (bytes > command.sizeBytes) {
          done(new Error(`the artifact is larger than the ${command.sizeBytes} bytes announced`));
          return;
        }
        hash.update(chunk);
        done(null, chunk);
      },
    });
    await pipeline(
      Readable.fromWeb(response.body as Parameters<typeof Readable.fromWeb>[0]),
      measure,
      createWriteStream(into, { mode: 0o600 }),
    );
    const sha256 = hash.digest('hex');
    if (bytes !== command.sizeBytes || sha256 !== command.sha256) {
      throw new Error(
        `the artifact does not match: ${bytes} bytes with SHA-256 ${sha256}, expected ${command.sizeBytes} bytes with ${command.sha256}`,
      );
    }
  }

  async function stage(command: UpgradeAgentCommand): Promise<UpgradeResult> {
    await mkdir(versions, { recursive: true });
    const tag = `${command.version}.${process.pid}`;
    const archive = join(versions, `.download-${tag}.tar.gz`);
    const unpacked = join(versions, `.unpack-${tag}`);
    const target = join(versions, command.version);
    try {
      await download(command, archive);
      await rm(unpacked, { recursive: true, force: true });
      await mkdir(unpacked, { recursive: true });
      await untar(archive, unpacked);
      const stated = (await readFile(join(unpacked, 'VERSION'), 'utf8').catch(() => '')).trim();
      if (stated !== command.version) {
        throw new Error(`the artifact says it is version ${JSON.stringify(stated)}, not ${command.version}`);
      }
      // A directory of this version left by an earlier attempt is replaced (it is not the running one:
      // the running version differs, or the control plane would not ask).
      await rm(target, { recursive: true, force: true });
      await rename(unpacked, target);
      const link = join(options.installDir, 'current');
      const next = join(options.installDir, `.current-${tag}`);
      await rm(next, { force: true });
      await symlink(join('versions', command.version), next);
      await rename(next, link);
      await prune(command.version);
      return { version: command.version, previous: options.currentVersion, installDir: options.installDir };
    } finally {
      await rm(archive, { force: true });
      await rm(unpacked, { recursive: true, force: true });
    }
  }

  /** Keeps the new version and the one running now (to go back by hand); removes older ones. */
  async function prune(kept: string): Promise<void> {
    const keep = new Set([kept, options.currentVersion]);
    for (const entry of await readdir(versions)) {
      if (entry.startsWith('.') || keep.has(entry)) continue;
      await rm(join(versions, entry), { recursive: true, force: true });
    }
  }

  return {
    stage(command) {
      // One at a time: a second request while one runs waits for it, then runs (or is already done).
      const run = (inProgress ?? Promise.resolve()).catch(() => undefined).then(() => stage(command));
      inProgress = run;
      return run;
    },
  };
}

/** What `current` points at, when the agent runs from an install (for its start-up log). */
export async function currentTarget(installDir: string): Promise<string | null> {
  return readlink(join(installDir, 'current')).catch(() => null);
}

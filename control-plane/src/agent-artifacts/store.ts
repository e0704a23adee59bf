import { access, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ApiError } from '@anvil/shared';
import { AGENT_VERSION_PATTERN } from '../config.ts';
import {
  ARTIFACT_ARCHES,
  type ArtifactArch,
  artifactFileName,
  type BuiltArtifact,
  buildAgentArtifact,
  isArtifactArch,
} from './build.ts';

/** What is published of one artifact (manifest.json, and what upgrades carry). */
export interface ArtifactInfo {
  version: string;
  arch: ArtifactArch;
  /** File name under /agent/artifacts/<version>/. */
  file: string;
  sha256: string;
  sizeBytes: number;
  nodeVersion: string | null;
  builtAt: string;
}

export interface ArtifactStoreOptions {
  dir: string;
  /** The agent version this control plane ships (built from its checkout on first request). */
  bundledVersion: string;
  /** <dir>/<arch>/node runtimes for architectures other than the control plane's own. */
  runtimesDir: string | null;
  /** This process's Node binary and architecture: the runtime of artifacts for that architecture. */
  ownNode?: { binary: string; arch: string; version: string };
  log?: (details: Record<string, unknown>, message: string) => void;
}

const metaName = (version: string, arch: ArtifactArch) => `${artifactFileName(version, arch)}.json`;

/**
 * The agent artifacts this control plane serves: <dir>/<version>/<artifact>.tar.gz with a .json beside
 * each (its SHA-256, size, runtime). Artifacts of other versions are put there by
 * `npm run build:agent-artifact`; those of the bundled version are also built here, once per process,
 * on first request (then written to the directory), so a control plane upgraded in place serves the
 * agent it ships without a separate step.
 */
export class AgentArtifactStore {
  readonly #o: ArtifactStoreOptions;
  readonly #own: { binary: string; arch: string; version: string };
  readonly #building = new Map<string, Promise<ArtifactInfo>>();

  constructor(options: ArtifactStoreOptions) {
    this.#o = options;
    this.#own = options.ownNode ?? {
      binary: process.execPath,
      arch: process.arch,
      version: process.version,
    };
  }

  get dir(): string {
    return this.#o.dir;
  }

  get bundledVersion(): string {
    return this.#o.bundledVersion;
  }

  /** Where a version's files are (the version must match AGENT_VERSION_PATTERN: no path tricks). */
  versionDir(version: string): string {
    if (!AGENT_VERSION_PATTERN.test(version)) throw new Error(`bad agent version ${version}`);
    return join(this.#o.dir, version);
  }

  /** The architectures an artifact of the bundled version can be built for here. */
  async buildableArches(): Promise<ArtifactArch[]> {
    const arches: ArtifactArch[] = [];
    for (const arch of Object.keys(ARTIFACT_ARCHES) as ArtifactArch[]) {
      if ((await this.#runtime(arch)) !== null) arches.push(arch);
    }
    return arches;
  }

  async #runtime(arch: ArtifactArch): Promise<{ binary: string; version: string | null } | null> {
    if (arch === this.#own.arch) return { binary: this.#own.binary, version: this.#own.version };
    if (!this.#o.runtimesDir) return null;
    const binary = join(this.#o.runtimesDir, arch, 'node');
    const version = await readFile(join(this.#o.runtimesDir, arch, 'VERSION'), 'utf8').then(
      (text) => text.trim() || null,
      () => null,
    );
    return access(binary).then(
      () => ({ binary, version }),
      () => null,
    );
  }

  /** Artifacts on disk (without building anything). */
  async published(version: string): Promise<ArtifactInfo[]> {
    const dir = this.versionDir(version);
    const names = await readdir(dir).catch(() => [] as string[]);
    const out: ArtifactInfo[] = [];
    for (const name of names.filter((n) => n.endsWith('.tar.gz.json')).sort()) {
      const info = JSON.parse(await readFile(join(dir, name), 'utf8')) as ArtifactInfo;
      if (info.version === version && isArtifactArch(info.arch)) out.push(info);
    }
    return out;
  }

  /** Every version with at least one artifact on disk, plus the bundled one. */
  async versions(): Promise<string[]> {
    const entries = await readdir(this.#o.dir, { withFileTypes: true }).catch(() => []);
    const found = new Set(
      entries.filter((e) => e.isDirectory() && AGENT_VERSION_PATTERN.test(e.name)).map((e) => e.name),
    );
    found.add(this.#o.bundledVersion);
    return [...found].sort();
  }

  /** Whether `version` can be served for `arch` (on disk, or the bundled version with a runtime). */
  async available(version: string, arch: ArtifactArch): Promise<boolean> {
    if (!AGENT_VERSION_PATTERN.test(version)) return false;
    if ((await this.published(version)).some((a) => a.arch === arch)) return true;
    return version === this.#o.bundledVersion && (await this.#runtime(arch)) !== null;
  }

  /**
   * The artifact of `version` for `arch`, building the bundled version's when this process has not yet.
   * ApiError AGENT_ARTIFACT_NOT_FOUND when there is none and none can be built.
   */
  async get(version: string, arch: ArtifactArch): Promise<ArtifactInfo> {
    if (version === this.#o.bundledVersion && (await this.#runtime(arch)) !== null)
      return this.#bundled(arch);
    const found = AGENT_VERSION_PATTERN.test(version)
      ? (await this.published(version)).find((a) => a.arch === arch)
      : undefined;
    if (!found) throw notFound(version, arch);
    return found;
  }

  #bundled(arch: ArtifactArch): Promise<ArtifactInfo> {
    const key = arch;
    let building = this.#building.get(key);
    if (!building) {
      building = this.#buildBundled(arch);
      this.#building.set(key, building);
      // A failed build is tried again on the next request.
      building.catch(() => this.#building.delete(key));
    }
    return building;
  }

  #buildBundled(arch: ArtifactArch): Promise<ArtifactInfo> {
    return this.publish(this.#o.bundledVersion, arch);
  }

  /**
   * Builds the agent of this checkout as `version` for `arch` and publishes it (what
   * `npm run build:agent-artifact` does). The runtime is this process's Node for its own architecture,
   * else <runtimesDir>/<arch>/node.
   */
  async publish(version: string, arch: ArtifactArch): Promise<ArtifactInfo> {
    const runtime = await this.#runtime(arch);
    if (!runtime) {
      throw new Error(
        `no Node.js runtime for ${arch}: put one at ${this.#o.runtimesDir ?? '$ANVIL_AGENT_RUNTIMES_DIR'}/${arch}/node`,
      );
    }
    const started = Date.now();
    const built = await buildAgentArtifact({
      version,
      arch,
      nodeBinary: runtime.binary,
      nodeVersion: runtime.version,
      outDir: this.versionDir(version),
    });
    const info = await this.record(built);
    this.#o.log?.(
      { version, arch, sha256: info.sha256, sizeBytes: info.sizeBytes, ms: Date.now() - started },
      'agent artifact built',
    );
    return info;
  }

  /** Writes the .json beside a built artifact, which publishes it. */
  async record(built: BuiltArtifact): Promise<ArtifactInfo> {
    const info: ArtifactInfo = {
      version: built.version,
      arch: built.arch,
      file: artifactFileName(built.version, built.arch),
      sha256: built.sha256,
      sizeBytes: built.sizeBytes,
      nodeVersion: built.nodeVersion,
      builtAt: new Date().toISOString(),
    };
    await writeFile(
      join(this.versionDir(built.version), metaName(built.version, built.arch)),
      `${JSON.stringify(info, null, 2)}\n`,
    );
    return info;
  }
}

function notFound(version: string, arch: string): ApiError {
  return new ApiError(
    'NOT_FOUND',
    `no agent artifact of version ${version} for linux-${arch} (build one with npm run build:agent-artifact)`,
    { version, arch },
  );
}

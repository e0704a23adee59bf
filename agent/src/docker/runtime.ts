import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import type {
  DockerInventory,
  RegistryAuth,
  SecretFile,
  SnapshotImageUsage,
  WorkloadSpec,
} from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { errorMessage, wrapError } from '../errors.ts';
import { buildCreateOptions, volumeDir } from './container-config.ts';
import {
  dockerMessage,
  ImageMissingError,
  isConflict,
  isNotFound,
  isNotModified,
  NameConflictError,
  NotManagedError,
} from './errors.ts';
import { type ContainerEvent, containerEvents } from './events.ts';
import { containerName, LABELS, type SpecContext, specHash } from './labels.ts';
import { type PullProgressEvent, pullImage } from './pull.ts';
import { snapshotUsageOf } from './snapshot-usage.ts';
import { buildTar } from './tar.ts';
import { addWorkspaceLayer, seedWorkspace, WORKSPACE_LABEL } from './workspace-archive.ts';

/** An Anvil container as `docker ps` lists it. */
export interface ManagedContainer {
  id: string;
  name: string;
  workloadId: string;
  hostId: string | null;
  specHash: string | null;
  stopGraceSeconds: number | null;
  /** created, running, restarting, paused, exited, dead, removing */
  state: string;
  /** Unix seconds. */
  created: number;
}

export type ContainerDetails = Dockerode.ContainerInspectInfo;
export type ContainerStats = Dockerode.ContainerStats;

/**
 * The one module that owns Docker. Every change to a container first checks that it carries
 * `anvil.managed=true`; "already stopped" and "no such container" count as done.
 */
export interface ContainerRuntime {
  info(): Promise<DockerInventory>;
  listManaged(hostId: string): Promise<ManagedContainer[]>;
  inspect(id: string): Promise<ContainerDetails | null>;
  /**
   * Creates `anvil-<workloadId>` with the spec's files already written into it; NameConflictError when
   * the name is taken (the caller re-lists), ImageMissingError when the image is not on the host.
   */
  create(spec: WorkloadSpec, context: SpecContext): Promise<string>;
  /** Writes files into a (created or stopped) container, parent directories created as needed. */
  writeFiles(id: string, files: SecretFile[]): Promise<void>;
  start(id: string): Promise<void>;
  /** SIGTERM (the image's stop signal), then SIGKILL after `graceSeconds`. */
  stop(id: string, graceSeconds: number): Promise<void>;
  remove(id: string): Promise<void>;
  imageExists(image: string): Promise<boolean>;
  pull(
    image: string,
    onProgress: (event: PullProgressEvent) => void,
    auth?: RegistryAuth | null,
  ): Promise<void>;
  /** The image's labels, or null when it is not on the host (optional: test doubles may omit it). */
  imageLabels?(image: string): Promise<Record<string, string> | null>;
  /** Multiplexed stdout/stderr with timestamps, following until the container stops. */
  followLogs(id: string, sinceSeconds: number): Promise<NodeJS.ReadableStream>;
  stats(id: string): Promise<ContainerStats | null>;
  /** Bytes in the container's writable layer (`docker inspect --size`: SizeRw); null when gone or unknown. */
  layerBytes?(id: string): Promise<number | null>;
  /** Events about the Anvil containers of host `hostId`. */
  events(signal: AbortSignal, hostId: string): AsyncGenerator<ContainerEvent>;
  /** Sends `signal` to a running container; false when it is not running (optional: test doubles may omit it). */
  kill?(id: string, signal: string): Promise<boolean>;
  /** `docker commit` as repository:tag; the new image's id and size. */
  /**
   * With `volumeDir`, the snapshot also keeps the workload's volume: its files are laid over the image at
   * the path the volume is mounted (WORKSPACE_LABEL names it), and seeded into the volume of a workload
   * created from the image.
   */
  commit?(
    id: string,
    target: { repository: string; tag: string; comment: string | null; volumeDir?: string | null },
  ): Promise<{ imageId: string; sizeBytes: number | null; workspace: string | null }>;
  /** Removes a workload's snapshot images (see the remove_snapshots command), keeping the ids in `keep`. */
  removeSnapshots?(target: {
    workloadId: string;
    repository: string;
    keep: string[];
    only?: string[];
  }): Promise<SnapshotRemoval>;
  /** A workload's snapshot images (see the list_snapshots command). */
  listSnapshots?(target: { workloadId: string; repository: string }): Promise<SnapshotListing[]>;
  /** Every snapshot image on the host with its own bytes, for storage metering. */
  snapshotUsage?(): Promise<SnapshotImageUsage[]>;
}

export interface SnapshotListing extends SnapshotImage {
  sizeBytes: number | null;
  /** ISO 8601. */
  createdAt: string;
}

export interface SnapshotImage {
  imageId: string;
  tags: string[];
}

export interface SnapshotRemoval {
  removed: SnapshotImage[];
  failed: (SnapshotImage & { error: string })[];
  kept: SnapshotImage[];
}

function toManaged(summary: Dockerode.ContainerInfo): ManagedContainer {
  const labels = summary.Labels ?? {};
  const grace = Number.parseInt(labels[LABELS.stopGrace] ?? '', 10);
  return {
    id: summary.Id,
    name: (summary.Names?.[0] ?? '').replace(/^\//, ''),
    workloadId: labels[LABELS.workload] ?? '',
    hostId: labels[LABELS.host] ?? null,
    specHash: labels[LABELS.specHash] ?? null,
    stopGraceSeconds: Number.isFinite(grace) ? grace : null,
    state: summary.State,
    created: summary.Created,
  };
}

export function createContainerRuntime(docker: Dockerode): ContainerRuntime {
  /**
   * Ids known to carry anvil.managed=true: created here, or listed by that label. A container's labels
   * never change, so this spares start, stop, remove and writeFiles the inspect that would only prove
   * it again (one Docker round trip on every container start). Rebuilt by each listManaged.
   */
  const owned = new Set<string>();

  /** Refuse unless the container is ours; false when it no longer exists. */
  async function isOwned(id: string): Promise<boolean> {
    return owned.has(id) || (await ownedOrNull(id)) !== null;
  }

  /** Inspect and refuse unless the container is ours; null when it no longer exists. */
  async function ownedOrNull(id: string): Promise<ContainerDetails | null> {
    let details: ContainerDetails;
    try {
      details = await docker.getContainer(id).inspect();
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
    if (details.Config.Labels?.[LABELS.managed] !== 'true') throw new NotManagedError(id);
    owned.add(details.Id);
    return details;
  }

  /**
   * One tar with every file, extracted at `/`: Docker creates missing parent directories. The error
   * never carries file contents (they are secrets), only paths.
   */
  async function putFiles(id: string, files: SecretFile[]): Promise<void> {
    const tar = buildTar(
      files.map((f) => ({
        name: f.path.replace(/^\/+/, ''),
        mode: f.mode,
        content: Buffer.from(f.contentBase64, 'base64'),
      })),
    );
    try {
      await docker.getContainer(id).putArchive(tar, { path: '/' });
    } catch (err) {
      throw new Error(`put ${files.map((f) => f.path).join(', ')}: ${dockerMessage(err)}`, { cause: err });
    }
  }

  /**
   * Creates the workload's volume directory; a new one is filled from a snapshot image that carries a
   * workspace (WORKSPACE_LABEL), so a cluster started from a final snapshot finds its /workspace again.
   * A fill that fails leaves no directory, so the next create fills it afresh.
   */
  async function prepareVolume(spec: WorkloadSpec, dir: string): Promise<void> {
    const fresh = !existsSync(dir);
    await mkdir(dir, { recursive: true, mode: 0o755 });
    if (!fresh || !spec.volume) return;
    let labels: Record<string, string> | undefined;
    try {
      labels = (await docker.getImage(spec.image).inspect()).Config?.Labels ?? undefined;
    } catch (err) {
      if (isNotFound(err)) return; // the create reports the missing image
      throw err;
    }
    if (labels?.[WORKSPACE_LABEL] !== spec.volume.containerPath) return;
    try {
      await seedWorkspace(docker, spec.image, spec.volume.containerPath, dir);
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** Images tagged in `repository` and committed from this workload's container, with those tags. */
  async function snapshotImages(workloadId: string, repository: string) {
    let images: Dockerode.ImageInfo[];
    try {
      images = await docker.listImages({ filters: { reference: [repository] } });
    } catch (err) {
      throw wrapError(`list images of ${repository}`, err);
    }
    return images.flatMap((image) => {
      const tags = (image.RepoTags ?? []).filter((t) => t.startsWith(`${repository}:`));
      return tags.length > 0 && image.Labels?.[LABELS.workload] === workloadId ? [{ image, tags }] : [];
    });
  }

  return {
    async info() {
      try {
        const [version, info] = await Promise.all([docker.version(), docker.info()]);
        const runtimes = Object.keys((info as { Runtimes?: Record<string, unknown> }).Runtimes ?? {}).sort();
        return {
          version: version.Version ?? null,
          apiVersion: version.ApiVersion ?? null,
          runtimes,
          nvidiaRuntime: runtimes.includes('nvidia'),
          error: null,
        };
      } catch (err) {
        return {
          version: null,
          apiVersion: null,
          runtimes: [],
          nvidiaRuntime: false,
          error: `docker info: ${errorMessage(err)}`,
        };
      }
    },

    async listManaged(hostId) {
      try {
        // Ids known before this call and absent from its answer are gone; ones added meanwhile stay.
        const stale = new Set(owned);
        const list = await docker.listContainers({
          all: true,
          filters: { label: [`${LABELS.managed}=true`, `${LABELS.host}=${hostId}`] },
        });
        for (const c of list) {
          owned.add(c.Id);
          stale.delete(c.Id);
        }
        for (const id of stale) owned.delete(id);
        return list.map(toManaged).filter((c) => c.workloadId !== '');
      } catch (err) {
        throw wrapError('list containers', err);
      }
    },

    async inspect(id) {
      try {
        return await ownedOrNull(id);
      } catch (err) {
        throw wrapError(`inspect container ${id}`, err);
      }
    },

    async create(spec, context) {
      const name = containerName(spec.workloadId);
      try {
        if (spec.volume) await prepareVolume(spec, volumeDir(context.volumeRoot, spec.workloadId));
        const hash = specHash(spec, context);
        const container = await docker.createContainer(
          buildCreateOptions(spec, { ...context, specHash: hash }),
        );
        owned.add(container.id);
        if (spec.files && spec.files.length > 0) {
          try {
            await putFiles(container.id, spec.files);
          } catch (err) {
            // A container without its files must not be started by a later pass: remove it, retry afresh.
            await docker
              .getContainer(container.id)
              .remove({ force: true })
              .catch(() => {});
            throw err;
          }
        }
        return container.id;
      } catch (err) {
        if (isConflict(err)) throw new NameConflictError(name);
        // The create body names an image and the account network (ensured just before): a missing network
        // is a plain failure, retried; only a missing image is pulled.
        if (isNotFound(err) && !/network/i.test(dockerMessage(err))) throw new ImageMissingError(spec.image);
        throw new Error(`create container ${name}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async writeFiles(id, files) {
      try {
        if (!(await isOwned(id))) throw new Error('no such container');
        await putFiles(id, files);
      } catch (err) {
        throw new Error(`write files into container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async start(id) {
      try {
        if (!(await isOwned(id))) throw new Error('no such container');
        await docker.getContainer(id).start();
      } catch (err) {
        if (isNotModified(err)) return;
        throw new Error(`start container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async stop(id, graceSeconds) {
      try {
        if (!(await isOwned(id))) return;
        await docker.getContainer(id).stop({ t: graceSeconds });
      } catch (err) {
        if (isNotModified(err) || isNotFound(err)) return;
        throw new Error(`stop container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async remove(id) {
      try {
        if (!(await isOwned(id))) return;
        // force: a container that restarted between our stop and this call still goes. Volumes stay:
        // workload data lives in bind mounts that the control plane decides about.
        await docker.getContainer(id).remove({ force: true });
        owned.delete(id);
      } catch (err) {
        // 409 "removal already in progress" is another pass (or Docker's auto-remove) doing our job.
        if (isNotFound(err) || (isConflict(err) && /already in progress/.test(dockerMessage(err)))) return;
        throw new Error(`remove container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async imageExists(image) {
      try {
        await docker.getImage(image).inspect();
        return true;
      } catch (err) {
        if (isNotFound(err)) return false;
        throw wrapError(`inspect image ${image}`, err);
      }
    },

    pull: (image, onProgress, auth) => pullImage(docker, image, onProgress, auth ?? null),

    async imageLabels(image) {
      try {
        const details = await docker.getImage(image).inspect();
        return (details.Config?.Labels as Record<string, string> | null | undefined) ?? {};
      } catch (err) {
        if (isNotFound(err)) return null;
        throw wrapError(`inspect image ${image}`, err);
      }
    },

    async followLogs(id, sinceSeconds) {
      try {
        return (await docker.getContainer(id).logs({
          follow: true,
          stdout: true,
          stderr: true,
          timestamps: true,
          since: sinceSeconds,
        })) as NodeJS.ReadableStream;
      } catch (err) {
        throw new Error(`follow logs of ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async stats(id) {
      try {
        return await docker.getContainer(id).stats({ stream: false, 'one-shot': true });
      } catch (err) {
        if (isNotFound(err)) return null;
        throw new Error(`stats of ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async layerBytes(id) {
      try {
        // dockerode passes the option as the query (?size=true); its types do not list it.
        const inspect = docker.getContainer(id).inspect as (options: object) => Promise<{ SizeRw?: number }>;
        const details = await inspect.call(docker.getContainer(id), { size: true });
        return typeof details.SizeRw === 'number' ? details.SizeRw : null;
      } catch (err) {
        if (isNotFound(err)) return null;
        throw new Error(`size of ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    events: (signal, hostId) => containerEvents(docker, signal, hostId),

    async kill(id, signal) {
      try {
        const details = await ownedOrNull(id);
        if (!details?.State?.Running) return false;
        await docker.getContainer(id).kill({ signal });
        return true;
      } catch (err) {
        // 409: it stopped between the inspect and the kill.
        if (isNotFound(err) || isConflict(err)) return false;
        throw new Error(`signal container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async snapshotUsage() {
      let images: Dockerode.ImageInfo[];
      try {
        images = await docker.listImages();
      } catch (err) {
        throw wrapError('list images', err);
      }
      return snapshotUsageOf(images);
    },

    async listSnapshots({ workloadId, repository }) {
      return (await snapshotImages(workloadId, repository)).map(({ image, tags }) => ({
        imageId: image.Id,
        tags,
        sizeBytes: typeof image.Size === 'number' ? image.Size : null,
        createdAt: new Date(image.Created * 1000).toISOString(),
      }));
    },

    async removeSnapshots({ workloadId, repository, keep, only }) {
      const result: SnapshotRemoval = { removed: [], failed: [], kept: [] };
      for (const { image, tags } of await snapshotImages(workloadId, repository)) {
        if (only && !only.includes(image.Id)) continue;
        const entry = { imageId: image.Id, tags };
        if (keep.includes(image.Id)) {
          result.kept.push(entry);
          continue;
        }
        try {
          // Untag one by one (never force): the last tag removes the image unless a container uses it.
          for (const tag of tags) await docker.getImage(tag).remove();
          result.removed.push(entry);
        } catch (err) {
          if (isNotFound(err)) result.removed.push(entry);
          else result.failed.push({ ...entry, error: dockerMessage(err) });
        }
      }
      return result;
    },

    async commit(id, target) {
      try {
        const details = await ownedOrNull(id);
        if (!details) throw new Error('no such container');
        // pause: false, so a running container is not frozen while its layer is copied.
        const result = (await docker.getContainer(id).commit({
          repo: target.repository,
          tag: target.tag,
          comment: target.comment ?? undefined,
          pause: false,
        })) as { Id?: string };
        let imageId = result.Id ?? '';
        const mount = target.volumeDir
          ? details.Mounts?.find((m) => m.Type === 'bind' && m.Source === target.volumeDir)
          : undefined;
        if (mount && target.volumeDir) {
          imageId = await addWorkspaceLayer(docker, imageId, target.volumeDir, mount.Destination, target);
        }
        const image = await docker.getImage(imageId).inspect();
        return {
          imageId,
          sizeBytes: typeof image.Size === 'number' ? image.Size : null,
          workspace: mount?.Destination ?? null,
        };
      } catch (err) {
        throw new Error(`commit container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },
  };
}

import { mkdir } from 'node:fs/promises';
import type { DockerInventory, WorkloadSpec } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { errorMessage, wrapError } from '../errors.ts';
import { buildCreateOptions, volumeDir } from './container-config.ts';
import {
  dockerMessage,
  isConflict,
  isNotFound,
  isNotModified,
  NameConflictError,
  NotManagedError,
} from './errors.ts';
import { type ContainerEvent, containerEvents } from './events.ts';
import { containerName, LABELS, type SpecContext, specHash } from './labels.ts';
import { type PullProgressEvent, pullImage } from './pull.ts';

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
  /** Creates `anvil-<workloadId>`; NameConflictError when the name is taken (the caller re-lists). */
  create(spec: WorkloadSpec, context: SpecContext): Promise<string>;
  start(id: string): Promise<void>;
  /** SIGTERM (the image's stop signal), then SIGKILL after `graceSeconds`. */
  stop(id: string, graceSeconds: number): Promise<void>;
  remove(id: string): Promise<void>;
  imageExists(image: string): Promise<boolean>;
  pull(image: string, onProgress: (event: PullProgressEvent) => void): Promise<void>;
  /** Multiplexed stdout/stderr with timestamps, following until the container stops. */
  followLogs(id: string, sinceSeconds: number): Promise<NodeJS.ReadableStream>;
  stats(id: string): Promise<ContainerStats | null>;
  events(signal: AbortSignal): AsyncGenerator<ContainerEvent>;
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
    return details;
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
        const list = await docker.listContainers({
          all: true,
          filters: { label: [`${LABELS.managed}=true`, `${LABELS.host}=${hostId}`] },
        });
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
        if (spec.volume)
          await mkdir(volumeDir(context.volumeRoot, spec.workloadId), { recursive: true, mode: 0o755 });
        const hash = specHash(spec, context);
        const container = await docker.createContainer(
          buildCreateOptions(spec, { ...context, specHash: hash }),
        );
        return container.id;
      } catch (err) {
        if (isConflict(err)) throw new NameConflictError(name);
        throw new Error(`create container ${name}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async start(id) {
      try {
        if (!(await ownedOrNull(id))) throw new Error('no such container');
        await docker.getContainer(id).start();
      } catch (err) {
        if (isNotModified(err)) return;
        throw new Error(`start container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async stop(id, graceSeconds) {
      try {
        if (!(await ownedOrNull(id))) return;
        await docker.getContainer(id).stop({ t: graceSeconds });
      } catch (err) {
        if (isNotModified(err) || isNotFound(err)) return;
        throw new Error(`stop container ${id}: ${dockerMessage(err)}`, { cause: err });
      }
    },

    async remove(id) {
      try {
        if (!(await ownedOrNull(id))) return;
        // force: a container that restarted between our stop and this call still goes. Volumes stay:
        // workload data lives in bind mounts that the control plane decides about.
        await docker.getContainer(id).remove({ force: true });
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

    pull: (image, onProgress) => pullImage(docker, image, onProgress),

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

    events: (signal) => containerEvents(docker, signal),
  };
}

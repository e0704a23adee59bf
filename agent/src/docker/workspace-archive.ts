import { spawn } from 'node:child_process';
import type Dockerode from 'dockerode';
import { dockerMessage } from './errors.ts';

/**
 * The label of a snapshot image that carries its workload's volume: the path (`/workspace`) whose content
 * in the image is the volume as it was when the snapshot was made.
 */
export const WORKSPACE_LABEL = 'anvil.workspace';

/** Runs `tar` with `args`, its stdin or stdout joined to `stream`; rejects unless it exits 0. */
function tar(
  args: string[],
  io: { input?: NodeJS.ReadableStream },
): {
  stdout: NodeJS.ReadableStream;
  done: Promise<void>;
} {
  const child = spawn('tar', args, { stdio: [io.input ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  if (io.input && child.stdin) io.input.pipe(child.stdin);
  const done = new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`tar ${args[0]}: exit ${code}: ${stderr.trim()}`)),
    );
  });
  // stdout is always a pipe here (the spawn options above).
  return { stdout: child.stdout as NodeJS.ReadableStream, done };
}

/**
 * A container made from `image` only to copy files in or out; never started, removed after `use`. A
 * snapshot image carries its workload container's `anvil.*` labels, which would make the reconciler take
 * this container for the workload's own: they are blanked on it, and handed to `use` to restore.
 */
async function withScratch<T>(
  docker: Dockerode,
  image: string,
  use: (container: Dockerode.Container, ownLabels: Record<string, string>) => Promise<T>,
): Promise<T> {
  const labels = (await docker.getImage(image).inspect()).Config?.Labels ?? {};
  const ownLabels = Object.fromEntries(Object.entries(labels).filter(([key]) => key.startsWith('anvil.')));
  const container = await docker.createContainer({
    Image: image,
    Cmd: ['true'],
    NetworkDisabled: true,
    Labels: Object.fromEntries(Object.keys(ownLabels).map((key) => [key, ''])),
  });
  try {
    return await use(container, ownLabels);
  } finally {
    await container.remove({ force: true }).catch(() => {});
  }
}

/**
 * A final snapshot keeps `/workspace` (a bind mount, which `docker commit` leaves out): the volume's files
 * are copied into a layer on top of the committed image at `containerPath`, and the result is committed
 * under the same name with WORKSPACE_LABEL. Returns the new image id.
 */
export async function addWorkspaceLayer(
  docker: Dockerode,
  committed: string,
  hostDir: string,
  containerPath: string,
  target: { repository: string; tag: string; comment: string | null },
): Promise<string> {
  return withScratch(docker, committed, async (scratch, ownLabels) => {
    const pack = tar(['-C', hostDir, '-cf', '-', '.'], {});
    try {
      await scratch.putArchive(pack.stdout as never, { path: containerPath });
    } catch (err) {
      throw new Error(`copy ${hostDir} into the snapshot: ${dockerMessage(err)}`, { cause: err });
    }
    await pack.done;
    const result = (await scratch.commit({
      repo: target.repository,
      tag: target.tag,
      comment: target.comment ?? undefined,
      // The labels the scratch container blanked come back, with the workspace's.
      changes: `LABEL ${Object.entries({ ...ownLabels, [WORKSPACE_LABEL]: containerPath })
        .map(([key, value]) => `${key}=${JSON.stringify(value)}`)
        .join(' ')}`,
      pause: false,
    })) as { Id?: string };
    return result.Id ?? '';
  });
}

/** Fills a new, empty volume directory with the workspace a snapshot image carries at `containerPath`. */
export async function seedWorkspace(
  docker: Dockerode,
  image: string,
  containerPath: string,
  hostDir: string,
): Promise<void> {
  await withScratch(docker, image, async (scratch) => {
    let archive: NodeJS.ReadableStream;
    try {
      archive = (await scratch.getArchive({ path: containerPath })) as NodeJS.ReadableStream;
    } catch (err) {
      throw new Error(`read ${containerPath} of ${image}: ${dockerMessage(err)}`, { cause: err });
    }
    // The archive holds the directory itself (`workspace/...`): strip it so the files land in hostDir.
    await tar(['-C', hostDir, '-xf', '-', '--strip-components=1'], { input: archive }).done;
  });
}

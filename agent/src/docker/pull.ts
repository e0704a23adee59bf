import type { RegistryAuth } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import { dockerMessage } from './errors.ts';

export interface PullProgressEvent {
  status: string;
  layer: string | null;
  current: number | null;
  total: number | null;
}

/**
 * Docker pulls every tag of a repository when none is given; the CLI adds `latest`, and so do we.
 * `registry:5000/team/app` has no tag (the colon is in the host part); `app@sha256:...` is pinned.
 */
export function normaliseImageRef(image: string): string {
  if (image.includes('@')) return image;
  const lastPart = image.slice(image.lastIndexOf('/') + 1);
  return lastPart.includes(':') ? image : `${image}:latest`;
}

const UNREACHABLE =
  /lookup|dial tcp|no such host|connection refused|i\/o timeout|timeout|network is unreachable|TLS handshake/i;

function pullError(image: string, err: unknown): Error {
  const message = dockerMessage(err);
  const hint = UNREACHABLE.test(message) ? ' (no registry answered from this host)' : '';
  return new Error(`pull image ${image}: ${message}${hint}`, { cause: err });
}

/**
 * Pull an image, reporting Docker's progress lines; rejects with Docker's reason, made readable. The
 * credentials travel only in the X-Registry-Auth header of this one request: the engine does not keep
 * them, and no message here ever carries them.
 */
export async function pullImage(
  docker: Dockerode,
  image: string,
  onProgress: (event: PullProgressEvent) => void,
  auth: RegistryAuth | null = null,
): Promise<void> {
  const ref = normaliseImageRef(image);
  let stream: NodeJS.ReadableStream;
  try {
    stream = await docker.pull(
      ref,
      auth
        ? {
            authconfig: {
              username: auth.username,
              password: auth.password,
              serveraddress: auth.serverAddress,
            },
          }
        : {},
    );
  } catch (err) {
    throw pullError(ref, err);
  }
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (err: Error | null) => (err ? reject(pullError(ref, err)) : resolve()),
      (event: {
        status?: string;
        id?: string;
        progressDetail?: { current?: number; total?: number };
        error?: string;
      }) => {
        if (event.error) return; // followProgress reports it through the finish callback
        onProgress({
          status: event.status ?? '',
          layer: event.id ?? null,
          current: event.progressDetail?.current ?? null,
          total: event.progressDetail?.total ?? null,
        });
      },
    );
  });
}

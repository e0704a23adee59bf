/** Docker's HTTP status on a failed call (dockerode puts it on the error), or null. */
export function dockerStatus(err: unknown): number | null {
  const code = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : null;
}

/** 404: the container or image is gone, which for stop and remove means the work is done. */
export const isNotFound = (err: unknown) => dockerStatus(err) === 404;
/** 304: already started / already stopped. */
export const isNotModified = (err: unknown) => dockerStatus(err) === 304;
/** 409: the name is taken, or the container is being removed already. */
export const isConflict = (err: unknown) => dockerStatus(err) === 409;

/** Docker's own sentence from an error, without dockerode's "(HTTP code 404) no such container -" prefix. */
export function dockerMessage(err: unknown): string {
  const json = (err as { json?: { message?: unknown } } | null)?.json;
  if (json && typeof json.message === 'string') return json.message;
  return err instanceof Error ? err.message : String(err);
}

export class NotManagedError extends Error {
  constructor(id: string) {
    super(`container ${id} does not carry anvil.managed=true; refusing to touch it`);
    this.name = 'NotManagedError';
  }
}

export class NameConflictError extends Error {
  constructor(name: string) {
    super(`container name ${name} is already taken`);
    this.name = 'NameConflictError';
  }
}

/** `docker create` answered 404 for the image: it must be pulled first (as `docker run` does on that answer). */
export class ImageMissingError extends Error {
  constructor(readonly image: string) {
    super(`image ${image} is not on this host`);
    this.name = 'ImageMissingError';
  }
}

import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { wrapError } from '../errors.ts';

/** What registration yields: the host's identity and its long-lived secret. */
export interface HostCredential {
  hostId: string;
  credential: string;
  /** The control plane that issued it, so a log line can say where it is valid. */
  controlPlane: string;
  createdAt: string;
}

export interface CredentialStore {
  readonly path: string;
  load(): Promise<HostCredential | null>;
  save(credential: HostCredential): Promise<void>;
}

function isCredential(value: unknown): value is HostCredential {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v['hostId'] === 'string' && typeof v['credential'] === 'string' && v['credential'] !== '';
}

/** `<stateDir>/credential.json`, readable by the agent's user only (0600, in a 0700 directory). */
export function fileCredentialStore(stateDir: string): CredentialStore {
  const path = join(stateDir, 'credential.json');
  return {
    path,
    async load() {
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw wrapError(`read credential ${path}`, err);
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch (err) {
        throw wrapError(`read credential ${path}: not JSON`, err);
      }
      if (!isCredential(parsed)) throw new Error(`read credential ${path}: missing hostId or credential`);
      // A copy restored from a backup may have lost its mode; a secret must not stay world-readable.
      await chmod(path, 0o600);
      return parsed;
    },
    async save(credential) {
      try {
        await mkdir(stateDir, { recursive: true, mode: 0o700 });
        // Write then rename, so a crash mid-write never leaves a truncated credential behind.
        const tmp = `${path}.${process.pid}.tmp`;
        await writeFile(tmp, `${JSON.stringify(credential, null, 2)}\n`, { mode: 0o600 });
        await chmod(tmp, 0o600);
        await rename(tmp, path);
      } catch (err) {
        throw wrapError(`save credential ${path}`, err);
      }
    },
  };
}

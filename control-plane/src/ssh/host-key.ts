import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { fingerprintOf } from './public-key.ts';

export const HOST_KEY_FILE = 'ssh_host_ed25519_key';

/**
 * The relay's host key: generated once into the data directory (mode 0600) and reused, so clients'
 * known_hosts stay valid across restarts. Replicas behind one address must share the file.
 */
export async function loadHostKey(
  dataDir: string,
): Promise<{ privateKey: string; fingerprint: string; path: string }> {
  const path = join(dataDir, HOST_KEY_FILE);
  let privateKey: string;
  try {
    privateKey = await readFile(path, 'utf8');
    if (((await stat(path)).mode & 0o077) !== 0) await chmod(path, 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    const pair = ssh2.utils.generateKeyPairSync('ed25519', { comment: 'anvil-ssh-relay' });
    privateKey = pair.private;
    // 'wx': two processes starting at once never overwrite each other's key; the loser reads the winner's.
    try {
      await writeFile(path, privateKey, { mode: 0o600, flag: 'wx' });
      await writeFile(`${path}.pub`, `${pair.public}\n`, { mode: 0o644, flag: 'wx' }).catch(() => {});
    } catch (writeError) {
      if ((writeError as NodeJS.ErrnoException).code !== 'EEXIST') throw writeError;
      privateKey = await readFile(path, 'utf8');
    }
  }
  const parsed = ssh2.utils.parseKey(privateKey);
  if (parsed instanceof Error) throw new Error(`SSH host key ${path} is unreadable: ${parsed.message}`);
  const key = Array.isArray(parsed) ? parsed[0]! : parsed;
  return { privateKey, fingerprint: fingerprintOf(key.getPublicSSH()), path };
}

import { randomBytes } from 'node:crypto';
import { chmod, link, mkdir, readFile, stat, unlink, writeFile } from 'node:fs/promises';
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
    const pair = generateHostKeyPair();
    privateKey = pair.private;
    // Written whole under a temporary name, then linked into place: link fails when the file exists, so
    // two processes starting at once never overwrite each other's key (the loser reads the winner's),
    // and no reader ever sees a half-written file.
    const temporary = `${path}.${randomBytes(6).toString('hex')}.tmp`;
    await writeFile(temporary, privateKey, { mode: 0o600 });
    try {
      await link(temporary, path);
      await writeFile(`${path}.pub`, `${pair.public}\n`, { mode: 0o644, flag: 'wx' }).catch(() => {});
    } catch (linkError) {
      if ((linkError as NodeJS.ErrnoException).code !== 'EEXIST') throw linkError;
      privateKey = await readFile(path, 'utf8');
    } finally {
      await unlink(temporary).catch(() => {});
    }
  }
  const parsed = ssh2.utils.parseKey(privateKey);
  if (parsed instanceof Error) throw new Error(`SSH host key ${path} is unreadable: ${parsed.message}`);
  const key = Array.isArray(parsed) ? parsed[0]! : parsed;
  return { privateKey, fingerprint: fingerprintOf(key.getPublicSSH()), path };
}

/**
 * A new ed25519 host key pair in OpenSSH format. ssh2's generator writes a private key its own parser
 * refuses about once in 250 tries ("Malformed OpenSSH private key"), which would stop the control plane
 * at its first start: a pair is only returned once it parses.
 */
export function generateHostKeyPair(): { private: string; public: string } {
  for (let attempt = 0; attempt < 20; attempt++) {
    const pair = ssh2.utils.generateKeyPairSync('ed25519', { comment: 'anvil-ssh-relay' });
    if (!(ssh2.utils.parseKey(pair.private) instanceof Error)) return pair;
  }
  throw new Error('could not generate a usable SSH host key');
}

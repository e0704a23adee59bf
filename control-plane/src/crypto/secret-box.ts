import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';
import { chmodSync, linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Encryption at rest for secrets the control plane must read back (webhook secrets, integration tokens):
 * AES-256-GCM with a random 96-bit nonce per value. A sealed value is one printable string:
 *
 *   v1.<key id>.<nonce>.<ciphertext>.<tag>      (base64url parts; key id = first 8 hex of SHA-256(key))
 *
 * The caller's `context` (for example `acc_x:notifications.webhook.secret`) is bound as associated data,
 * so a sealed value copied to another account or field fails to open instead of leaking there.
 *
 * Rotation: start with the new key in ANVIL_SECRET_KEY and the old one(s) in ANVIL_SECRET_KEY_PREVIOUS.
 * Values sealed under a previous key still open; `needsReseal` tells the owner of the data to seal them
 * again under the current key (the settings store does this at start-up), after which the previous key
 * can be dropped from the configuration.
 */
export class SecretBox {
  private readonly current: Key;
  private readonly byId: Map<string, Key>;

  constructor(currentKey: Buffer, previousKeys: Buffer[] = []) {
    this.current = toKey(currentKey);
    this.byId = new Map([this.current, ...previousKeys.map(toKey)].map((k) => [k.id, k]));
  }

  /** Identifies the current key without revealing it. */
  get keyId(): string {
    return this.current.id;
  }

  seal(plaintext: string, context: string): string {
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.current.bytes, nonce);
    cipher.setAAD(Buffer.from(context, 'utf8'));
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v1', this.current.id, b64(nonce), b64(body), b64(cipher.getAuthTag())].join('.');
  }

  open(sealed: string, context: string): string {
    const parts = sealed.split('.');
    if (parts.length !== 5 || parts[0] !== 'v1') throw new SecretBoxError('not a sealed value');
    const [, id, nonce, body, tag] = parts as [string, string, string, string, string];
    const key = this.byId.get(id);
    if (!key) {
      throw new SecretBoxError(
        `sealed under key ${id}, which is neither ANVIL_SECRET_KEY nor in ANVIL_SECRET_KEY_PREVIOUS`,
      );
    }
    try {
      const decipher = createDecipheriv('aes-256-gcm', key.bytes, Buffer.from(nonce, 'base64url'));
      decipher.setAAD(Buffer.from(context, 'utf8'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString(
        'utf8',
      );
    } catch {
      throw new SecretBoxError('sealed value failed authentication (tampered, or bound to another place)');
    }
  }

  /**
   * A keyed MAC of `message` under the current key (base64url HMAC-SHA256): a credential the control plane
   * can re-derive instead of storing (a worker's token). `verifyMac` also takes one made under a previous key.
   */
  mac(message: string): string {
    return createHmac('sha256', this.current.bytes).update(message, 'utf8').digest('base64url');
  }

  verifyMac(message: string, mac: string): boolean {
    const given = Buffer.from(mac, 'utf8');
    for (const key of this.byId.values()) {
      const expected = Buffer.from(
        createHmac('sha256', key.bytes).update(message, 'utf8').digest('base64url'),
        'utf8',
      );
      if (expected.length === given.length && timingSafeEqual(expected, given)) return true;
    }
    return false;
  }

  static isSealed(value: unknown): value is string {
    return typeof value === 'string' && /^v1\.[0-9a-f]{8}\.[\w-]+\.[\w-]*\.[\w-]+$/.test(value);
  }

  /** True when the value was sealed under a previous key and should be sealed again. */
  needsReseal(sealed: string): boolean {
    return sealed.split('.')[1] !== this.current.id;
  }
}

export class SecretBoxError extends Error {
  constructor(message: string) {
    super(`secret box: ${message}`);
    this.name = 'SecretBoxError';
  }
}

interface Key {
  id: string;
  bytes: Buffer;
}

function toKey(bytes: Buffer): Key {
  if (bytes.length !== 32) throw new SecretBoxError(`a key must be 32 bytes, got ${bytes.length}`);
  return { id: createHash('sha256').update(bytes).digest('hex').slice(0, 8), bytes };
}

const b64 = (buffer: Buffer) => buffer.toString('base64url');

/** Parses a 32-byte key written as 64 hex characters or as base64 (standard or URL-safe). */
export function parseSecretKey(text: string): Buffer | null {
  const value = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(value)) return Buffer.from(value, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}=?$/.test(value)) {
    const bytes = Buffer.from(value.replaceAll('-', '+').replaceAll('_', '/'), 'base64');
    return bytes.length === 32 ? bytes : null;
  }
  return null;
}

export type SecretKeySource = 'config' | 'file' | 'generated';

/**
 * The key from configuration, or for a development setup without one, the key in
 * `<dataDir>/secret.key` (created with mode 0600 on first use). Creation is atomic (write a temporary
 * file, then hard-link it into place), so processes starting together end up with the same key.
 *
 * Policy: a key file that its group or other users may read or write (any of mode 0077) is refused, and
 * the control plane does not start: whoever can read it can open every stored secret, and a warning in a
 * log nobody reads protects nothing. The error names the file and the `chmod 600` that fixes it.
 */
export function loadSecretBox(options: {
  secretKey: Buffer | null;
  previousSecretKeys: Buffer[];
  dataDir: string;
}): { box: SecretBox; source: SecretKeySource; path: string | null } {
  if (options.secretKey) {
    return {
      box: new SecretBox(options.secretKey, options.previousSecretKeys),
      source: 'config',
      path: null,
    };
  }
  const path = join(options.dataDir, 'secret.key');
  const existing = readKeyFile(path);
  if (existing) return { box: new SecretBox(existing, options.previousSecretKeys), source: 'file', path };
  mkdirSync(options.dataDir, { recursive: true });
  const temp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writeFileSync(temp, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
  // The mode given to writeFileSync applies only to a file it creates; make sure of it either way.
  chmodSync(temp, 0o600);
  let source: SecretKeySource = 'generated';
  try {
    linkSync(temp, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    source = 'file';
  } finally {
    unlinkSync(temp);
  }
  const key = readKeyFile(path);
  if (!key) throw new SecretBoxError(`${path} does not hold a 32-byte key (hex or base64)`);
  return { box: new SecretBox(key, options.previousSecretKeys), source, path };
}

/** Mode bits that let the file's group or other users read, write or run it. */
const SHARED_MODE_BITS = 0o077;

function readKeyFile(path: string): Buffer | null {
  let text: string;
  try {
    const mode = statSync(path).mode & 0o777;
    if ((mode & SHARED_MODE_BITS) !== 0) {
      throw new SecretBoxError(
        `${path} has mode 0${mode.toString(8)}: other users may read the key that opens every stored ` +
          `secret; refusing to start. Run \`chmod 600 ${path}\` (or set ANVIL_SECRET_KEY) and start again`,
      );
    }
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
  const key = parseSecretKey(text);
  if (!key) throw new SecretBoxError(`${path} does not hold a 32-byte key (hex or base64)`);
  return key;
}

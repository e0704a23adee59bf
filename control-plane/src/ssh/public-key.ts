import { createHash } from 'node:crypto';
import { ApiError } from '@anvil/shared';
import ssh2, { type ParsedKey } from 'ssh2';

// ssh2 is CommonJS: under Node's ESM loader only its default export carries `utils` and `Server`.
const { utils } = ssh2;

/** Key types the relay accepts. DSA is refused (OpenSSH disabled it), as are certificates. */
export const ACCEPTED_KEY_TYPES = [
  'ssh-ed25519',
  'ssh-rsa',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
] as const;

export const MIN_RSA_BITS = 2048;

export interface PublicKeyInfo {
  type: string;
  /** "<type> <base64>", comment dropped. */
  openssh: string;
  /** OpenSSH's `SHA256:<base64 without padding>` of the key blob. */
  fingerprint: string;
  bits: number | null;
  comment: string | null;
  /** The wire-format blob (what a client offers during publickey authentication). */
  blob: Buffer;
}

/** The fingerprint OpenSSH prints (`ssh-keygen -lf`): SHA-256 of the key blob, base64 without '='. */
export function fingerprintOf(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** Parses an OpenSSH public key line, refusing private keys, weak RSA and unknown types (400 VALIDATION_ERROR). */
export function parsePublicKey(text: string): PublicKeyInfo {
  const trimmed = text.trim();
  if (trimmed.includes('PRIVATE KEY')) {
    throw invalid('is a private key: send the public half (the .pub file), never the private key');
  }
  if (trimmed.includes('\n')) throw invalid('must be a single line "<type> <base64> [comment]"');
  const parsed = utils.parseKey(trimmed);
  if (parsed instanceof Error) throw invalid(`is not an OpenSSH public key (${parsed.message})`);
  const key = (Array.isArray(parsed) ? parsed[0] : parsed) as ParsedKey | undefined;
  if (!key) throw invalid('is not an OpenSSH public key');
  if (key.isPrivateKey()) throw invalid('is a private key: send the public half (the .pub file)');
  if (!(ACCEPTED_KEY_TYPES as readonly string[]).includes(key.type)) {
    throw invalid(`has type ${key.type}; accepted: ${ACCEPTED_KEY_TYPES.join(', ')}`);
  }
  const blob = key.getPublicSSH();
  const bits = bitsOf(key.type, blob);
  if (key.type === 'ssh-rsa' && (bits ?? 0) < MIN_RSA_BITS) {
    throw invalid(`is a ${bits}-bit RSA key; RSA keys need at least ${MIN_RSA_BITS} bits`);
  }
  return {
    type: key.type,
    openssh: `${key.type} ${blob.toString('base64')}`,
    fingerprint: fingerprintOf(blob),
    bits,
    comment: key.comment ? key.comment : null,
    blob,
  };
}

/** Key size: the RSA modulus length, the curve size for ECDSA, 256 for Ed25519. */
function bitsOf(type: string, blob: Buffer): number | null {
  if (type === 'ssh-ed25519') return 256;
  if (type.startsWith('ecdsa-sha2-nistp')) return Number(type.slice('ecdsa-sha2-nistp'.length));
  if (type !== 'ssh-rsa') return null;
  // string "ssh-rsa", mpint e, mpint n (RFC 4253 6.6).
  let offset = 0;
  const next = (): Buffer => {
    const length = blob.readUInt32BE(offset);
    const value = blob.subarray(offset + 4, offset + 4 + length);
    offset += 4 + length;
    return value;
  };
  next();
  next();
  let n = next();
  while (n.length > 0 && n[0] === 0) n = n.subarray(1);
  if (n.length === 0) return 0;
  return (n.length - 1) * 8 + (32 - Math.clz32(n[0]!));
}

function invalid(reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `public_key ${reason}`, { field: 'public_key', reason });
}

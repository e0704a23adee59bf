import { createHash, randomBytes } from 'node:crypto';

/**
 * Join tokens and host credentials are 256-bit random values, so a fast hash is enough to store them:
 * there is nothing to brute-force. Their prefixes make a leaked value easy to recognise and to scan for.
 */
export const JOIN_TOKEN_PREFIX = 'anvjt_';
export const HOST_CREDENTIAL_PREFIX = 'anvhc_';

function secret(prefix: string): string {
  return prefix + randomBytes(32).toString('base64url');
}

export function generateJoinToken(): string {
  return secret(JOIN_TOKEN_PREFIX);
}

export function generateHostCredential(): string {
  return secret(HOST_CREDENTIAL_PREFIX);
}

export function hashSecret(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

/** What may be shown of a join token after creation: its prefix and four random characters. */
export function joinTokenPrefix(value: string): string {
  return value.slice(0, JOIN_TOKEN_PREFIX.length + 4);
}

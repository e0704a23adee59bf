import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Upload tokens: 32 random bytes (base64url) behind a `dsu_` prefix, shown once when the dataset is
 * created. Only their SHA-256 is stored, next to the one dataset they open, with an expiry.
 */
export const UPLOAD_TOKEN_PREFIX = 'dsu_';

export function newUploadToken(): { token: string; hash: string } {
  const token = `${UPLOAD_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
  return { token, hash: hashUploadToken(token) };
}

export function hashUploadToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export function looksLikeUploadToken(value: string): boolean {
  return value.startsWith(UPLOAD_TOKEN_PREFIX);
}

/** Constant-time comparison of a presented token with the stored hash. */
export function uploadTokenMatches(token: string, storedHash: string): boolean {
  const presented = Buffer.from(hashUploadToken(token), 'hex');
  const stored = Buffer.from(storedHash, 'hex');
  return presented.length === stored.length && timingSafeEqual(presented, stored);
}

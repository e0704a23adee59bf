import { hash, randomBytes } from 'node:crypto';

/**
 * Anvil API key format: `anv_<env>_<32 base62 random chars><6 base62 checksum chars>`.
 * 32 base62 characters carry ~190 bits of randomness. The checksum is CRC-32 of everything before it,
 * so a mistyped key is refused before any database lookup, and the fixed prefix makes leaked keys easy
 * to find with secret scanners (the same scheme GitHub uses for its tokens).
 */
export const API_KEY_ENVIRONMENTS = ['live', 'test'] as const;
export type ApiKeyEnvironment = (typeof API_KEY_ENVIRONMENTS)[number];

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const RANDOM_LENGTH = 32;
const CHECKSUM_LENGTH = 6;
const KEY_PATTERN = /^anv_(live|test)_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$/;

function base62(bytesNeeded: number): string {
  let out = '';
  while (out.length < bytesNeeded) {
    for (const byte of randomBytes(bytesNeeded * 2)) {
      // 248 = 4 * 62: rejecting the rest keeps every character equally likely.
      if (byte < 248 && out.length < bytesNeeded) out += BASE62[byte % 62];
    }
  }
  return out;
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 of an ASCII string (key bodies are ASCII: the pattern is checked first), without a Buffer. */
function crc32(text: string): number {
  let crc = 0xffffffff;
  for (let i = 0; i < text.length; i++) crc = CRC_TABLE[(crc ^ text.charCodeAt(i)) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

function checksum(body: string): string {
  let value = crc32(body);
  let out = '';
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = BASE62[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out;
}

export function generateApiKey(environment: ApiKeyEnvironment): string {
  const body = `anv_${environment}_${base62(RANDOM_LENGTH)}`;
  return body + checksum(body);
}

/** True when the value has the Anvil key shape and its checksum matches; no database needed. */
export function isWellFormedApiKey(value: string): boolean {
  const match = KEY_PATTERN.exec(value);
  if (!match) return false;
  return checksum(value.slice(0, -CHECKSUM_LENGTH)) === match[3];
}

export function apiKeyEnvironment(value: string): ApiKeyEnvironment | null {
  const match = KEY_PATTERN.exec(value);
  return match ? (match[1] as ApiKeyEnvironment) : null;
}

/** Keys are 190-bit random values, so a fast hash is enough: there is nothing to brute-force. */
export function hashApiKey(value: string): string {
  // One-shot hash: this runs on every authenticated request, and avoids a Hash object each time.
  return hash('sha256', value, 'hex');
}

/** What may be shown of a key after creation: its prefix and the first four random characters. */
export function displayPrefix(value: string): string {
  return value.slice(0, value.indexOf('_', 4) + 5);
}

export const API_KEY_RANDOM_LENGTH = RANDOM_LENGTH;

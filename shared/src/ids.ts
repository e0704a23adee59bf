import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';

// Random bytes are drawn from the CSPRNG 4 kB at a time and each is used once (as Node's randomUUID
// does): a request id on every request would otherwise cost a randomBytes call each (~7% of the API's CPU).
let pool = Buffer.alloc(0);
let poolOffset = 0;

function randomByte(): number {
  if (poolOffset >= pool.length) {
    pool = randomBytes(4096);
    poolOffset = 0;
  }
  return pool[poolOffset++]!;
}

/** Random lowercase base36 string of `length` characters (rejection sampling keeps it unbiased). */
export function randomBase36(length: number): string {
  let out = '';
  while (out.length < length) {
    const byte = randomByte();
    // 252 = 7 * 36: rejecting the rest keeps every character equally likely.
    if (byte < 252) out += ALPHABET[byte % 36];
  }
  return out;
}

/** Prefixed ids as the spec shows them: usr_<id>, key_<id>, acc_<id>, ... (~103 bits of randomness). */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomBase36(20)}`;
}

export type IdPrefix =
  | 'acc'
  | 'usr'
  | 'key'
  | 'boost'
  | 'inv'
  | 'grant'
  | 'share'
  | 'audit'
  | 'alert'
  | 'host'
  | 'jt'
  | 'wl'
  | 'cluster'
  | 'tmpl'
  | 'port'
  | 'secret'
  | 'ep'
  | 'ds'
  | 'dsv'
  | 'dsup'
  | 'job'
  | 'ckpt'
  | 'art'
  | 'rcp'
  | 'tune'
  | 'exp'
  | 'run'
  | 'req'
  | 'use'
  | 'sshkey'
  | 'term';

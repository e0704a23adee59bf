import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';

/** Random lowercase base36 string of `length` characters (rejection sampling keeps it unbiased). */
export function randomBase36(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 252 && out.length < length) out += ALPHABET[byte % 36];
    }
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
  | 'cluster'
  | 'tmpl'
  | 'port'
  | 'secret'
  | 'ep'
  | 'ds'
  | 'job'
  | 'tune'
  | 'exp'
  | 'run'
  | 'req';

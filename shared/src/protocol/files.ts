import { type Static, Type } from '@sinclair/typebox';

/**
 * Files in a workload's volume (training artifacts and checkpoints): a path relative to the volume's root,
 * never absolute, never with a `.` or `..` segment, in a plain alphabet. The agent still resolves it
 * against the real volume directory and refuses anything that lands outside (a symlink pointing out).
 */
export const VOLUME_PATH_PATTERN = '^(?!/)(?!.*(^|/)\\.{1,2}(/|$))(?!.*//)[A-Za-z0-9_.\\-/]{1,512}$';
export const VolumePath = Type.String({ pattern: VOLUME_PATH_PATTERN, maxLength: 512 });

const VOLUME_PATH = new RegExp(VOLUME_PATH_PATTERN);

/** True when `path` is a volume path the agent accepts (the protocol's pattern, checked before sending). */
export function isVolumePath(path: string): boolean {
  return path.length <= 512 && VOLUME_PATH.test(path);
}

/** A lower-case hex SHA-256. */
export const Sha256Hex = Type.String({ pattern: '^[0-9a-f]{64}$' });

/**
 * The answer to `stat_file`: what the volume path is. `sha256` of a regular file when asked for (the agent
 * keeps digests by inode, size and modification time, so a file is hashed once per content); a directory
 * answers its total bytes (files under it, symlinks not followed) and no digest.
 */
export const FileStat = Type.Object({
  kind: Type.Union([
    Type.Literal('file'),
    Type.Literal('directory'),
    Type.Literal('missing'),
    // The path resolves outside the volume (a symlink pointing out): nothing about it is told.
    Type.Literal('outside'),
  ]),
  sizeBytes: Type.Integer({ minimum: 0 }),
  modifiedAt: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
  sha256: Type.Union([Sha256Hex, Type.Null()]),
});
export type FileStat = Static<typeof FileStat>;

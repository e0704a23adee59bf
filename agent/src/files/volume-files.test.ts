import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { text } from 'node:stream/consumers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VolumeFiles } from './volume-files.ts';

describe('VolumeFiles', () => {
  let root: string;
  let outside: string;
  let files: VolumeFiles;
  const body = 'abcdefghijklmnopqrstuvwxyz';

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'anvil-volume-files-'));
    outside = join(root, 'elsewhere');
    await mkdir(join(root, 'job_a-r0', 'ckpt'), { recursive: true });
    await mkdir(outside);
    await writeFile(join(outside, 'secret.txt'), 'host secret');
    await writeFile(join(root, 'job_a-r0', 'model.bin'), body);
    await writeFile(join(root, 'job_a-r0', 'ckpt', 'w.pt'), '12345');
    await symlink(join(outside, 'secret.txt'), join(root, 'job_a-r0', 'leak.txt'));
    await symlink(outside, join(root, 'job_a-r0', 'leakdir'));
    files = new VolumeFiles(root);
  });
  afterAll(() => rm(root, { recursive: true, force: true }));

  it('stats a file with its SHA-256 and serves byte ranges of it', async () => {
    const stat = await files.stat('job_a-r0', 'model.bin', true);
    expect(stat).toMatchObject({ kind: 'file', sizeBytes: 26 });
    expect(stat.sha256).toBe(createHash('sha256').update(body).digest('hex'));
    const file = await files.open('job_a-r0', 'model.bin', false);
    expect(await text(file.stream(10, 5))).toBe('klmno');
    expect(await text(file.stream(20, null))).toBe('uvwxyz');
    await file.close();
    expect(await files.stat('job_a-r0', 'ckpt', false)).toMatchObject({ kind: 'directory', sizeBytes: 5 });
    expect((await files.stat('job_a-r0', 'nope.bin', true)).kind).toBe('missing');
  });

  it('refuses paths that leave the volume, symlinks pointing out, and workloads without a volume', async () => {
    expect((await files.stat('job_a-r0', 'leak.txt', true)).kind).toBe('outside');
    expect((await files.stat('job_a-r0', 'leakdir/secret.txt', true)).kind).toBe('outside');
    await expect(files.open('job_a-r0', 'leak.txt', false)).rejects.toThrow(/leaves the workload's volume/);
    await expect(files.open('job_a-r0', '../elsewhere/secret.txt', false)).rejects.toThrow(
      /not a volume path/,
    );
    await expect(files.open('job_b-r0', 'model.bin', false)).rejects.toThrow(/has no volume on this host/);
    await expect(files.remove('job_a-r0', 'leakdir/secret.txt')).rejects.toThrow(/leaves/);
    // A symlink is removed as a link: what it points at stays.
    expect(await files.remove('job_a-r0', 'leak.txt')).toEqual({ removed: true, sizeBytes: 0 });
    expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('host secret');
  });

  it('deletes files and directories inside the volume', async () => {
    expect(await files.remove('job_a-r0', 'ckpt')).toEqual({ removed: true, sizeBytes: 5 });
    expect(await files.remove('job_a-r0', 'ckpt')).toEqual({ removed: false, sizeBytes: 0 });
    expect((await files.stat('job_a-r0', 'ckpt', false)).kind).toBe('missing');
  });
});

import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_CENTRAL_DIRECTORY, parseZip } from './zip.ts';

/**
 * A zip's end record says how large its central directory is, and the parser reads that much into
 * memory: an upload must not be able to make it allocate more than MAX_CENTRAL_DIRECTORY.
 */
describe('zip central directory bound', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'anvil-zip-bound-'));
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  /** A sparse file (no disk used) ending in an end record that claims `directorySize` bytes at offset 0. */
  async function claimingDirectory(directorySize: number): Promise<{ path: string; size: number }> {
    const path = join(dir, `claims-${directorySize}.zip`);
    const size = directorySize + 22;
    const eocd = Buffer.alloc(22);
    eocd.writeUInt32LE(0x06054b50, 0);
    eocd.writeUInt16LE(1, 8);
    eocd.writeUInt16LE(1, 10);
    eocd.writeUInt32LE(directorySize, 12);
    eocd.writeUInt32LE(0, 16);
    const handle = await open(path, 'w');
    try {
      await handle.truncate(size);
      await handle.write(eocd, 0, 22, size - 22);
    } finally {
      await handle.close();
    }
    return { path, size };
  }

  it('is far below 256 MiB', () => {
    expect(MAX_CENTRAL_DIRECTORY).toBeLessThanOrEqual(16 * 1024 * 1024);
  });

  it('refuses a directory claimed larger than the bound before reading it', async () => {
    const { path, size } = await claimingDirectory(64 * 1024 * 1024);
    const result = await parseZip(path, size, {});
    expect(result.checks[0]).toMatchObject({ status: 'fail', message: expect.stringMatching(/too large/) });
    expect(result.examples).toBeNull();
  });

  it('still reads a directory within the bound (here: a damaged one, which is reported as such)', async () => {
    const { path, size } = await claimingDirectory(1024);
    const result = await parseZip(path, size, {});
    expect(result.checks[0]).toMatchObject({ status: 'fail', message: expect.stringMatching(/damaged/) });
  });
});

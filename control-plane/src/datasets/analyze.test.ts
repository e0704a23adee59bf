import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32, gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { analyze } from './analyze.ts';
import { HDF5_SIGNATURE } from './formats.ts';

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** A zip of stored (uncompressed) entries, written by hand from the format's records. */
function zipOf(entries: Array<{ name: string; data?: Buffer }>): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name);
    const data = entry.data ?? Buffer.alloc(0);
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(name.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(data.length, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, data);
    centrals.push(central, name);
    offset += 30 + name.length + data.length;
  }
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, end]);
}

async function tarOf(entries: Array<{ name: string; data?: string; type?: 'directory' }>): Promise<Buffer> {
  const archive = pack();
  for (const entry of entries) {
    if (entry.type === 'directory') archive.entry({ name: entry.name, type: 'directory' });
    else archive.entry({ name: entry.name }, entry.data ?? '');
  }
  archive.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of archive) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describe('analyze (the pass over stored bytes)', () => {
  let dir: string;
  let n = 0;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'anvil-analyze-'));
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  const file = async (bytes: Buffer | string) => {
    const path = join(dir, `f${n++}`);
    await writeFile(path, bytes);
    return path;
  };

  it('counts a zip from its central directory: files, directories, sizes, extensions', async () => {
    const bytes = zipOf([
      { name: 'images/' },
      { name: 'images/a.jpg', data: Buffer.alloc(100, 1) },
      { name: 'images/b.png', data: Buffer.alloc(50, 2) },
      { name: 'labels.txt', data: Buffer.from('a\nb\n') },
    ]);
    const result = await analyze(
      await file(bytes),
      'zip',
      { supported_formats: ['jpg', 'png'], min_examples: 2 },
      null,
    );
    expect(result.checksum).toBe(sha256(bytes));
    expect(result.sizeBytes).toBe(bytes.length);
    expect(result.examples).toBe(3);
    expect(result.compressedBytes).toBe(154);
    expect(result.statistics).toMatchObject({
      entries: 4,
      files: 3,
      directories: 1,
      uncompressedBytes: 154,
      extensions: { jpg: 1, png: 1, txt: 1 },
    });
    expect(result.status).toBe('error');
    expect(result.error).toMatchObject({
      code: 'VALIDATION_FAILED',
      details: { field: 'supported_formats', examples: [{ entry: 'labels.txt' }] },
    });
  });

  it('walks tar and gzip-compressed tar archives header by header', async () => {
    const tar = await tarOf([
      { name: 'data/', type: 'directory' },
      { name: 'data/one.txt', data: 'hello' },
      { name: 'data/two.txt', data: 'world!' },
    ]);
    const plain = await analyze(await file(tar), 'tar', {}, null);
    expect(plain).toMatchObject({ status: 'ready', examples: 2, compressedBytes: null });
    expect(plain.statistics).toMatchObject({
      files: 2,
      directories: 1,
      uncompressedBytes: 11,
      archive: 'tar',
    });
    const gz = gzipSync(tar);
    const compressed = await analyze(await file(gz), 'tar', {}, null);
    expect(compressed).toMatchObject({
      status: 'ready',
      examples: 2,
      compressedBytes: gz.length,
      checksum: sha256(gz),
    });
    const broken = await analyze(await file(gz.subarray(0, gz.length / 2)), 'tar', {}, null);
    expect(broken.status).toBe('error');
    expect(broken.error?.details).toMatchObject({ field: 'parse' });
  });

  it('checks parquet and hdf5 by their magic bytes, leaving examples unknown', async () => {
    const parquet = Buffer.concat([Buffer.from('PAR1'), Buffer.alloc(20), Buffer.from('PAR1')]);
    expect(await analyze(await file(parquet), 'parquet', {}, null)).toMatchObject({
      status: 'ready',
      examples: null,
      schema: null,
    });
    const notParquet = await analyze(await file('a,b\n1,2\n'), 'parquet', {}, null);
    expect(notParquet.error).toMatchObject({
      code: 'UNSUPPORTED_FORMAT',
      details: { providedFormat: 'parquet' },
    });
    const hdf5 = Buffer.concat([Buffer.alloc(512), HDF5_SIGNATURE, Buffer.alloc(100)]);
    const h = await analyze(await file(hdf5), 'hdf5', {}, null);
    expect(h).toMatchObject({ status: 'ready', examples: null });
    expect(h.checks[1]?.message).toContain('offset 512');
  });

  it('fails the encoding check on bytes that are not UTF-8 and names the line', async () => {
    const bytes = Buffer.concat([
      Buffer.from('{"t":"ok"}\n{"t":"'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('"}\n'),
    ]);
    const result = await analyze(await file(bytes), 'jsonl', {}, null);
    expect(result.error).toMatchObject({ details: { field: 'encoding', examples: [{ line: 2 }] } });
    expect(result.examples).toBe(1);
  });

  it('applies sequence-length and example-count limits and warns about what it cannot check', async () => {
    const lines = ['{"q":"abc","a":"de"}', '{"q":"a","a":""}', '', '{"q":"abcdefgh","a":"x"}'].join('\n');
    const result = await analyze(
      await file(lines),
      'jsonl',
      {
        required_fields: ['q'],
        optional_fields: ['a'],
        min_sequence_length: 2,
        max_examples: 2,
        language_detection: true,
      },
      null,
    );
    expect(result.statistics['sequenceLength']).toEqual({ min: 1, max: 9, mean: (5 + 1 + 9) / 3 });
    const byName = Object.fromEntries(result.checks.map((c) => [c.name, c.status]));
    expect(byName).toMatchObject({
      min_sequence_length: 'fail',
      max_examples: 'fail',
      required_fields: 'pass',
    });
    expect(result.warnings).toEqual(
      expect.arrayContaining([
        expect.stringContaining('1 empty line'),
        expect.stringContaining('language_detection'),
      ]),
    );
  });

  it('refuses rows whose cell count differs from the csv header', async () => {
    const result = await analyze(await file('a,b\n1,2\n3\n4,5,6\n'), 'csv', {}, null);
    expect(result.examples).toBe(1);
    expect(result.error).toMatchObject({ details: { field: 'parse' } });
    expect(result.checks.find((c) => c.name === 'parse')?.failures).toBe(2);
  });

  it('reports an unclosed csv quote as a parse failure and names duplicate header columns apart', async () => {
    const unclosed = await analyze(await file('a,b\n1,2\n3,"open\n'), 'csv', {}, null);
    expect(unclosed.status).toBe('error');
    expect(unclosed.error).toMatchObject({ details: { field: 'parse' } });
    const duplicated = await analyze(await file('x,x,y\n1,2,3\n'), 'csv', {}, null);
    expect(duplicated.schema?.fields.map((f) => f.name)).toEqual(['x', 'x_2', 'y']);
  });

  it('stops a pass when its signal is aborted (shutdown), for streamed and positional formats', async () => {
    const stop = new AbortController();
    stop.abort();
    await expect(analyze(await file('{"a":1}\n'), 'jsonl', {}, null, stop.signal)).rejects.toThrow();
    await expect(analyze(await file(zipOf([{ name: 'a' }])), 'zip', {}, null, stop.signal)).rejects.toThrow();
  });

  it('reports a checksum that differs from the one the upload recorded', async () => {
    const result = await analyze(await file('{"a":1}\n'), 'jsonl', {}, '0'.repeat(64));
    expect(result.error).toMatchObject({ details: { field: 'checksum' } });
  });
});

import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { ExecSession } from '../fleet/tunnels/types.ts';
import { waitFor } from '../testing/wait.ts';
import type { FileReadStream, FsResult } from './container-fs.ts';
import { ReadAhead, ReadError } from './read-ahead.ts';

/**
 * A file served like READ_SCRIPT serves it: a stream from the offset asked, in 16 KiB pieces, written
 * with back-pressure (so a paused reader stops the producer), optionally failing part way.
 */
function fakeFile(file: Buffer, options: { failAt?: number } = {}) {
  const opens: number[] = [];
  let produced = 0;
  /** The stream of the last open, and whether its producer waits for it to drain. */
  let last: { stdout: PassThrough; waiting: boolean } | null = null;
  const open = async (offset: number): Promise<FsResult<FileReadStream>> => {
    opens.push(offset);
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    let settle!: (exit: { code: number | null }) => void;
    const exit = new Promise<{ code: number | null }>((resolve) => {
      settle = resolve;
    });
    let closed = false;
    const state = { stdout, waiting: false };
    last = state;
    const session: ExecSession = {
      stdin: new PassThrough(),
      stdout,
      stderr,
      exit,
      resize() {},
      signal() {},
      close() {
        closed = true;
        stdout.destroy();
        settle({ code: null });
      },
    };
    void (async () => {
      const stop = Math.min(file.length, options.failAt ?? file.length);
      for (let at = offset; at < stop && !closed; at += 16 * 1024) {
        const piece = file.subarray(at, Math.min(at + 16 * 1024, stop));
        produced += piece.length;
        if (!stdout.write(piece)) {
          state.waiting = true;
          await once(stdout, 'drain');
          state.waiting = false;
        }
      }
      if (closed) return;
      const failed = options.failAt !== undefined && options.failAt < file.length;
      if (failed) stderr.write('cat: read error: Input/output error\n');
      stdout.end();
      stderr.end();
      settle({ code: failed ? 1 : 0 });
    })();
    const attrs = { mode: 0o100644, size: file.length, uid: 0, gid: 0, atime: 0, mtime: 0, nlink: 1 };
    return { ok: true, value: { session, attrs, head: Buffer.alloc(0) } };
  };
  /** The reader paused the stream and the producer waits on it: nothing more is produced until a read. */
  const stalled = () => last?.stdout.isPaused() === true && last.waiting;
  return { open, opens, produced: () => produced, stalled };
}

async function started(open: ReturnType<typeof fakeFile>['open']): Promise<ReadAhead> {
  const result = await ReadAhead.start(open);
  if (!result.ok) throw new Error(result.error.reason);
  return result.value;
}

const MiB = 1024 * 1024;

/** A read's pieces joined, as a client receives them. */
const read = (reader: ReadAhead, offset: number, length: number) =>
  reader.read(offset, length).then((parts) => (parts ? Buffer.concat(parts) : null));

describe('ReadAhead', () => {
  it('answers many outstanding sequential reads from one stream, with a short read and EOF at the end', async () => {
    const file = randomBytes(3 * MiB + 1000);
    const fake = fakeFile(file);
    const reader = await started(fake.open);
    const reads: Promise<Buffer | null>[] = [];
    for (let at = 0; at < file.length + 64 * 1024; at += 32 * 1024) reads.push(read(reader, at, 32 * 1024));
    const results = await Promise.all(reads);
    const data = results.filter((r): r is Buffer => r !== null);
    expect(Buffer.concat(data).equals(file)).toBe(true);
    expect(data.at(-1)!.length).toBe(file.length % (32 * 1024));
    expect(results.filter((r) => r === null)).toHaveLength(2);
    expect(fake.opens).toEqual([0]);
    reader.close();
  });

  it('serves reads that arrive out of order, and late ones just behind, without reopening', async () => {
    const file = randomBytes(2 * MiB);
    const fake = fakeFile(file);
    const reader = await started(fake.open);
    const [b, a, c] = await Promise.all([
      read(reader, 65_536, 32_768),
      read(reader, 0, 32_768),
      read(reader, 32_768, 32_768),
    ]);
    expect(a!.equals(file.subarray(0, 32_768))).toBe(true);
    expect(b!.equals(file.subarray(65_536, 98_304))).toBe(true);
    expect(c!.equals(file.subarray(32_768, 65_536))).toBe(true);
    expect((await read(reader, 1_500_000, 100))!.equals(file.subarray(1_500_000, 1_500_100))).toBe(true);
    expect((await read(reader, 1_000_000, 100))!.equals(file.subarray(1_000_000, 1_000_100))).toBe(true);
    expect(fake.opens).toEqual([0]);
    reader.close();
  });

  it('reopens at the offset for a seek back past what it keeps, or far ahead', async () => {
    const file = randomBytes(16 * MiB);
    const fake = fakeFile(file);
    const reader = await started(fake.open);
    const far = 12 * MiB + 5;
    expect((await read(reader, far, 1000))!.equals(file.subarray(far, far + 1000))).toBe(true);
    expect(fake.opens).toEqual([0, far]);
    expect((await read(reader, 7, 1000))!.equals(file.subarray(7, 1007))).toBe(true);
    expect(fake.opens).toEqual([0, far, 7]);
    reader.close();
  });

  it('keeps its memory bounded: the stream is paused a few MiB ahead of what was asked', async () => {
    const file = randomBytes(40 * MiB);
    const fake = fakeFile(file);
    const reader = await started(fake.open);
    await read(reader, 0, 32_768);
    await waitFor('the read-ahead to pause the stream', fake.stalled, 10_000, 10);
    expect(fake.produced()).toBeLessThan(5 * MiB);
    expect(fake.produced()).toBeGreaterThan(2 * MiB);
    reader.close();
  });

  it('answers a stream cut short with the error, not with an early EOF', async () => {
    const file = randomBytes(1 * MiB);
    const fake = fakeFile(file, { failAt: 300_000 });
    const reader = await started(fake.open);
    expect((await read(reader, 0, 100_000))!.equals(file.subarray(0, 100_000))).toBe(true);
    const error = await read(reader, 400_000, 1000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReadError);
    expect((error as ReadError).error.reason).toMatch(/Input\/output error/);
  });

  it('fails pending reads when closed', async () => {
    const fake = fakeFile(randomBytes(1000));
    const reader = await started(fake.open);
    reader.close();
    await expect(reader.read(0, 10)).rejects.toThrow('file closed');
  });
});

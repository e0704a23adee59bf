import { PassThrough, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { ExecSession } from '../fleet/tunnels/types.ts';
import type { ContainerFs, FileWriteStream, FsResult, WriteOpenOptions } from './container-fs.ts';
import { FileWriter } from './file-writer.ts';

/**
 * A file written the way the container's writers write it: each writer process puts what its stdin
 * receives at its own position (0, the end when appending, or the offset it was reopened at), a little
 * later (the tunnel's delay), and exits once its stdin ended and everything landed.
 */
function fakeDisk(options: { failWrites?: boolean } = {}) {
  let disk = Buffer.alloc(0);
  const log: string[] = [];
  const stdinWrites: number[] = [];
  let live = 0;
  const put = (at: number, data: Buffer) => {
    if (at + data.length > disk.length)
      disk = Buffer.concat([disk, Buffer.alloc(at + data.length - disk.length)]);
    data.copy(disk, at);
  };
  const writer = (label: string, start: () => number): FsResult<FileWriteStream> => {
    let position = start();
    live++;
    log.push(`open ${label}`);
    let settle!: (exit: { code: number | null }) => void;
    const exit = new Promise<{ code: number | null }>((resolve) => {
      settle = resolve;
    });
    const stderr = new PassThrough();
    const take = (chunk: Buffer, callback: () => void) => {
      stdinWrites.push(chunk.length);
      setTimeout(() => {
        if (!options.failWrites) {
          put(position, chunk);
          position += chunk.length;
        }
        callback();
      }, 1);
    };
    const stdin = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        take(chunk, callback);
      },
      // As the tunnel's stdin: writes corked together go out as one.
      writev(chunks, callback) {
        take(Buffer.concat(chunks.map((c) => c.chunk as Buffer)), callback);
      },
      final(callback) {
        setTimeout(() => {
          live--;
          log.push(`exit ${label}`);
          if (options.failWrites) stderr.write('cat: write error: No space left on device\n');
          stderr.end();
          settle({ code: options.failWrites ? 1 : 0 });
          callback();
        }, 1);
      },
    });
    const session: ExecSession = {
      stdin,
      stdout: new PassThrough(),
      stderr,
      exit,
      resize() {},
      signal() {},
      close() {},
    };
    return { ok: true, value: { session } };
  };
  const fs = {
    async openWrite(_path: string, open: WriteOpenOptions) {
      if (open.truncate) disk = Buffer.alloc(0);
      return writer(open.append ? 'append' : 'start', () => (open.append ? disk.length : 0));
    },
    async reopenWrite(_path: string, offset: number) {
      // Two writers at once could interleave their bytes in any order: the writer must never do that.
      if (live > 0) throw new Error('reopened while another writer still runs');
      return writer(`at ${offset}`, () => offset);
    },
  } as unknown as ContainerFs;
  return {
    fs,
    log,
    stdinWrites,
    contents: () => disk,
    open: (o: Partial<WriteOpenOptions> = {}) =>
      fs.openWrite('/f', { create: true, exclusive: false, truncate: true, append: false, mode: null, ...o }),
  };
}

async function writerOn(disk: ReturnType<typeof fakeDisk>, append = false): Promise<FileWriter> {
  const first = await disk.open({ append, truncate: !append });
  if (!first.ok) throw new Error('open failed');
  return new FileWriter(disk.fs, '/f', first.value, append);
}

describe('FileWriter', () => {
  it('streams pipelined sequential writes through one writer, gathered into few large writes', async () => {
    const disk = fakeDisk();
    const writer = await writerOn(disk);
    const parts = Array.from({ length: 20 }, (_, i) => Buffer.alloc(1000, i));
    const acks = parts.map((part, i) => writer.write(i * 1000, part));
    expect(await Promise.all(acks)).toEqual(parts.map(() => null));
    expect(await writer.close()).toBeNull();
    expect(disk.contents().equals(Buffer.concat(parts))).toBe(true);
    expect(disk.log).toEqual(['open start', 'exit start']);
    // Sent in one turn of the event loop: one write into the process, not twenty.
    expect(disk.stdinWrites).toEqual([20_000]);
  });

  it('rewrites earlier bytes and fills gaps with zeros, one writer at a time, in request order', async () => {
    const disk = fakeDisk();
    const writer = await writerOn(disk);
    const expected = Buffer.alloc(5000);
    const writes: [number, Buffer][] = [
      [0, Buffer.alloc(1000, 1)],
      [1000, Buffer.alloc(1000, 2)],
      [4000, Buffer.alloc(1000, 3)],
      [500, Buffer.alloc(100, 4)],
      [600, Buffer.alloc(100, 5)],
    ];
    // Sent without waiting, as a client pipelines them.
    const acks = writes.map(([at, data]) => {
      data.copy(expected, at);
      return writer.write(at, data);
    });
    expect(await Promise.all(acks)).toEqual(writes.map(() => null));
    expect(await writer.close()).toBeNull();
    expect(disk.contents().equals(expected)).toBe(true);
    expect(disk.log).toEqual([
      'open start',
      'exit start',
      'open at 4000',
      'exit at 4000',
      'open at 500',
      'exit at 500',
    ]);
  });

  it('settles so every write is in the file, then goes on from where it stood', async () => {
    const disk = fakeDisk();
    const writer = await writerOn(disk);
    await writer.write(0, Buffer.from('hello '));
    expect(await writer.settle()).toBeNull();
    expect(disk.contents().toString()).toBe('hello ');
    await writer.write(6, Buffer.from('world'));
    expect(await writer.close()).toBeNull();
    expect(disk.contents().toString()).toBe('hello world');
  });

  it('appends whatever offset a write names', async () => {
    const disk = fakeDisk();
    const first = await writerOn(disk);
    await first.write(0, Buffer.from('abc'));
    await first.close();
    const writer = await writerOn(disk, true);
    await writer.write(0, Buffer.from('def'));
    await writer.write(0, Buffer.from('gh'));
    expect(await writer.close()).toBeNull();
    expect(disk.contents().toString()).toBe('abcdefgh');
  });

  it('answers writes in the order they came even when their bytes are taken out of order', async () => {
    // A stdin whose write callbacks fire in a scrambled order (as the tunnel's can): the answers must
    // not follow them, or OpenSSH's client truncates the upload.
    const taken: Buffer[] = [];
    const delays = [9, 1, 5, 0, 7, 3, 2, 8, 4, 6];
    let calls = 0;
    let settle!: (exit: { code: number | null }) => void;
    const stdin = {
      cork() {},
      uncork() {},
      write(chunk: Buffer, callback?: (error?: Error | null) => void) {
        taken.push(chunk);
        if (callback) setTimeout(() => callback(), delays[calls++ % delays.length]);
        return true;
      },
      end() {
        setTimeout(() => settle({ code: 0 }), 20);
      },
      on() {},
    };
    const session = {
      stdin,
      stdout: new PassThrough(),
      stderr: new PassThrough(),
      exit: new Promise<{ code: number | null }>((resolve) => {
        settle = resolve;
      }),
      resize() {},
      signal() {},
      close() {},
    } as unknown as ExecSession;
    (session.stderr as PassThrough).end();
    const writer = new FileWriter({} as ContainerFs, '/f', { session }, false);
    const order: number[] = [];
    const writes: Promise<unknown>[] = [];
    // Spread over several turns of the event loop, so they go out as several writes into stdin.
    for (let i = 0; i < 30; i++) {
      writes.push(writer.write(i * 100, Buffer.alloc(100, i)).then(() => order.push(i)));
      if (i % 3 === 2) await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(writes);
    expect(calls).toBeGreaterThan(5);
    expect(order).toEqual(Array.from({ length: 30 }, (_, i) => i));
    expect(
      Buffer.concat(taken).equals(Buffer.concat(Array.from({ length: 30 }, (_, i) => Buffer.alloc(100, i)))),
    ).toBe(true);
    expect(await writer.close()).toBeNull();
  });

  it('reports a writer that failed, at close', async () => {
    const disk = fakeDisk({ failWrites: true });
    const writer = await writerOn(disk);
    await writer.write(0, Buffer.from('lost'));
    expect(await writer.close()).toEqual({ kind: 'failure', reason: 'No space left on device' });
  });
});

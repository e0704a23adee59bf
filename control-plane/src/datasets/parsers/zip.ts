import { open } from 'node:fs/promises';
import { setImmediate } from 'node:timers/promises';
import type { ParseResult, ValidationConfig } from '../validation-config.ts';
import { ArchiveTally, parseFailure } from './archive-stats.ts';

const EOCD = 0x06054b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_EOCD = 0x06064b50;
const CENTRAL_ENTRY = 0x02014b50;
/**
 * The central directory is read whole into memory, so its size is what one upload can make the control
 * plane allocate: 16 MiB holds some 200,000 entries with 30-character names. A larger one is refused
 * before anything is read (the EOCD record's claim is enough).
 */
export const MAX_CENTRAL_DIRECTORY = 16 * 1024 * 1024;

class ZipError extends Error {}

/**
 * A zip archive, read from its central directory (the end of the file) without extracting anything:
 * entries, files and directories, the sum of the entries' compressed and uncompressed sizes (zip64
 * included). examples = file entries.
 */
export async function parseZip(
  path: string,
  fileSize: number,
  config: ValidationConfig,
  signal?: AbortSignal,
): Promise<ParseResult> {
  const tally = new ArchiveTally(config);
  const handle = await open(path, 'r');
  try {
    const read = async (position: number, length: number) => {
      if (position < 0 || length < 0 || position + length > fileSize) throw new ZipError('truncated archive');
      const buffer = Buffer.alloc(length);
      await handle.read(buffer, 0, length, position);
      return buffer;
    };
    const tailLength = Math.min(fileSize, 22 + 65_535);
    const tail = await read(fileSize - tailLength, tailLength);
    let eocd = -1;
    for (let i = tail.length - 22; i >= 0; i--) {
      if (tail.readUInt32LE(i) === EOCD) {
        eocd = i;
        break;
      }
    }
    if (eocd === -1) throw new ZipError('no end of central directory record');
    let entries = tail.readUInt16LE(eocd + 10);
    let directorySize = tail.readUInt32LE(eocd + 12);
    let directoryOffset = tail.readUInt32LE(eocd + 16);
    if (entries === 0xffff || directorySize === 0xffffffff || directoryOffset === 0xffffffff) {
      const locatorAt = fileSize - tailLength + eocd - 20;
      const locator = await read(locatorAt, 20);
      if (locator.readUInt32LE(0) !== ZIP64_LOCATOR) throw new ZipError('zip64 locator missing');
      const record = await read(Number(locator.readBigUInt64LE(8)), 56);
      if (record.readUInt32LE(0) !== ZIP64_EOCD) throw new ZipError('zip64 end record missing');
      entries = Number(record.readBigUInt64LE(32));
      directorySize = Number(record.readBigUInt64LE(40));
      directoryOffset = Number(record.readBigUInt64LE(48));
    }
    if (directorySize > MAX_CENTRAL_DIRECTORY)
      throw new ZipError(`central directory of ${directorySize} bytes is too large to read`);
    const directory = await read(directoryOffset, directorySize);
    let compressed = 0;
    let at = 0;
    for (let n = 0; n < entries; n++) {
      // Millions of entries would hold the event loop for seconds: let other work in now and then.
      if (n > 0 && n % 10_000 === 0) {
        await setImmediate();
        signal?.throwIfAborted();
      }
      if (at + 46 > directory.length || directory.readUInt32LE(at) !== CENTRAL_ENTRY)
        throw new ZipError(`central directory entry ${n + 1} is damaged`);
      let entryCompressed = directory.readUInt32LE(at + 20);
      let entrySize = directory.readUInt32LE(at + 24);
      const nameLength = directory.readUInt16LE(at + 28);
      const extraLength = directory.readUInt16LE(at + 30);
      const commentLength = directory.readUInt16LE(at + 32);
      const name = directory.toString('utf8', at + 46, at + 46 + nameLength);
      const extra = directory.subarray(at + 46 + nameLength, at + 46 + nameLength + extraLength);
      if (entrySize === 0xffffffff || entryCompressed === 0xffffffff) {
        // zip64 extended information: the 64-bit values, in this order, only for the fields that overflowed.
        for (let e = 0; e + 4 <= extra.length; ) {
          const id = extra.readUInt16LE(e);
          const size = extra.readUInt16LE(e + 2);
          if (id === 0x0001) {
            let v = e + 4;
            if (entrySize === 0xffffffff) {
              entrySize = Number(extra.readBigUInt64LE(v));
              v += 8;
            }
            if (entryCompressed === 0xffffffff) entryCompressed = Number(extra.readBigUInt64LE(v));
            break;
          }
          e += 4 + size;
        }
      }
      compressed += entryCompressed;
      if (name.endsWith('/')) tally.directories += 1;
      else tally.file(name, entrySize);
      at += 46 + nameLength + extraLength + commentLength;
    }
    const result = tally.finish({ compressedBytes: compressed, statistics: { archive: 'zip' } });
    result.checks.unshift({ name: 'parse', status: 'pass', message: `zip archive with ${entries} entries` });
    return result;
  } catch (error) {
    if (!(error instanceof ZipError)) throw error;
    const result = tally.finish({ compressedBytes: null, statistics: { archive: 'zip' } });
    result.examples = null;
    result.checks.unshift(parseFailure(`not a readable zip archive: ${error.message}`));
    return result;
  } finally {
    await handle.close();
  }
}

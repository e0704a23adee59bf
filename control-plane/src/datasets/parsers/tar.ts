import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { extract, type Header } from 'tar-stream';
import type { ParseResult, ValidationConfig } from '../validation-config.ts';
import { ArchiveTally, parseFailure } from './archive-stats.ts';

/**
 * A tar archive (optionally gzip-compressed, recognised by its first bytes), walked header by header
 * as it streams; entry bodies are read and dropped, nothing is extracted. examples = regular files.
 */
export async function parseTar(
  source: Readable,
  gzipped: boolean,
  storedBytes: number,
  config: ValidationConfig,
): Promise<ParseResult> {
  const tally = new ArchiveTally(config);
  const walker = extract();
  const input = gzipped ? source.pipe(createGunzip()) : source;
  let failure: string | null = null;
  const done = new Promise<void>((resolve) => {
    walker.on('entry', (header: Header, stream, next) => {
      if (header.type === 'file' || header.type === 'contiguous-file')
        tally.file(header.name, header.size ?? 0);
      else if (header.type === 'directory') tally.directories += 1;
      else tally.other += 1;
      stream.on('end', next);
      stream.resume();
    });
    walker.on('finish', resolve);
    walker.on('error', (error: Error) => {
      failure = error.message;
      resolve();
    });
    input.on('error', (error: Error) => {
      failure = error.message;
      walker.destroy();
      resolve();
    });
  });
  input.pipe(walker);
  await done;
  const result = tally.finish({
    compressedBytes: gzipped ? storedBytes : null,
    statistics: { archive: gzipped ? 'tar+gzip' : 'tar' },
  });
  if (failure !== null) {
    result.examples = null;
    result.checks.unshift(parseFailure(`not a readable tar archive: ${failure}`));
  } else {
    result.checks.unshift({
      name: 'parse',
      status: 'pass',
      message: `tar archive with ${tally.files + tally.directories + tally.other} entries`,
    });
  }
  return result;
}

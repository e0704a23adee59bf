import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { addAbortSignal } from 'node:stream';
import { DATASET_FORMATS, type DatasetFormat, sniffBinaryFormat } from './formats.ts';
import { parseHdf5, parseParquet } from './parsers/binary.ts';
import { parseCsv } from './parsers/csv.ts';
import { parseJsonl } from './parsers/jsonl.ts';
import { parseTar } from './parsers/tar.ts';
import { parseZip } from './parsers/zip.ts';
import type { Check, DatasetError, ParseResult, ValidationConfig } from './validation-config.ts';

/** The outcome of one pass over a dataset version's bytes: what the dataset row records. */
export interface Analysis extends ParseResult {
  sizeBytes: number;
  checksum: string;
  status: 'ready' | 'error';
  error: DatasetError | null;
}

const READ = { highWaterMark: 256 * 1024 };

/** A read stream of the file that the signal destroys (a control plane shutting down mid-pass). */
function reader(path: string, signal: AbortSignal | undefined) {
  const stream = createReadStream(path, READ);
  return signal ? addAbortSignal(signal, stream) : stream;
}

async function sha256Of(path: string, signal: AbortSignal | undefined): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of reader(path, signal)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

async function headOf(path: string): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(512);
    const { bytesRead } = await handle.read(buffer, 0, 512, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

function unsupported(format: DatasetFormat, detected: string): DatasetError {
  return {
    code: 'UNSUPPORTED_FORMAT',
    message: `the dataset is declared ${format} but its bytes are ${detected}`,
    details: { providedFormat: format, detectedFormat: detected, supportedFormats: [...DATASET_FORMATS] },
  };
}

function emptyResult(): ParseResult {
  return { examples: null, compressedBytes: null, schema: null, statistics: {}, checks: [], warnings: [] };
}

/**
 * Reads a stored version end to end: its SHA-256 and size, then the format's parser (streaming for
 * jsonl, csv and tar; the central directory for zip; signatures for parquet and hdf5). The first bytes
 * are checked against the declared format first, so a zip declared as jsonl is named as such.
 */
export async function analyze(
  path: string,
  format: DatasetFormat,
  config: ValidationConfig,
  expectedChecksum: string | null,
  signal?: AbortSignal,
): Promise<Analysis> {
  const sizeBytes = (await stat(path)).size;
  const checksum = await sha256Of(path, signal);
  const head = await headOf(path);
  const sniffed = sniffBinaryFormat(head);
  let result: ParseResult;
  let formatError: DatasetError | null = null;
  switch (format) {
    case 'jsonl':
    case 'csv':
      if (sniffed !== null) {
        formatError = unsupported(format, sniffed);
        result = emptyResult();
      } else {
        const source = reader(path, signal);
        result = format === 'jsonl' ? await parseJsonl(source, config) : await parseCsv(source, config);
      }
      break;
    case 'zip':
      if (sizeBytes > 0 && sniffed !== 'zip') {
        formatError = unsupported(format, sniffed ?? 'not a zip archive');
        result = emptyResult();
      } else result = await parseZip(path, sizeBytes, config, signal);
      break;
    case 'tar':
      if (sniffed !== null && sniffed !== 'tar' && sniffed !== 'gzip') {
        formatError = unsupported(format, sniffed);
        result = emptyResult();
      } else result = await parseTar(reader(path, signal), sniffed === 'gzip', sizeBytes, config);
      break;
    case 'parquet':
      result = await parseParquet(path, sizeBytes, config);
      if (result.checks[0]?.status === 'fail') formatError = unsupported(format, sniffed ?? 'not Parquet');
      break;
    case 'hdf5':
      result = await parseHdf5(path, sizeBytes, config);
      if (result.checks[0]?.status === 'fail') formatError = unsupported(format, sniffed ?? 'not HDF5');
      break;
  }
  const checksumCheck: Check =
    expectedChecksum === null || expectedChecksum === checksum
      ? { name: 'checksum', status: 'pass', message: `sha256 ${checksum}` }
      : {
          name: 'checksum',
          status: 'fail',
          message: `stored bytes hash to ${checksum}, the upload recorded ${expectedChecksum}`,
        };
  result.checks.unshift(checksumCheck);
  if (sizeBytes === 0) result.warnings.push('the file is empty');
  let error: DatasetError | null = formatError;
  if (!error) {
    const failed = result.checks.find((check) => check.status === 'fail');
    if (failed) {
      error = {
        code: 'VALIDATION_FAILED',
        message: `check ${failed.name} failed: ${failed.message}`,
        details: { field: failed.name, reason: failed.message, examples: failed.examples ?? [] },
      };
    }
  }
  // Parsers that read by position (zip) or stop early end without error: a stop must not pass as a result.
  signal?.throwIfAborted();
  return { ...result, sizeBytes, checksum, status: error ? 'error' : 'ready', error };
}

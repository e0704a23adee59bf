import { open } from 'node:fs/promises';
import { HDF5_SIGNATURE } from '../formats.ts';
import { countChecks, type ParseResult, type ValidationConfig } from '../validation-config.ts';

const PAR1 = Buffer.from('PAR1', 'latin1');

async function readAt(path: string, position: number, length: number): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buffer, 0, length, position);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

function signatureOnly(ok: boolean, message: string, format: string, config: ValidationConfig): ParseResult {
  const warnings = [
    `${format} files are checked by signature only: examples, schema and statistics are not read`,
  ];
  if (countChecks(config, 0).length > 0)
    warnings.push('min_examples/max_examples were not checked: the examples are not counted');
  return {
    examples: null,
    compressedBytes: null,
    schema: null,
    statistics: { signature: ok ? 'valid' : 'invalid' },
    checks: [{ name: 'parse', status: ok ? 'pass' : 'fail', message }],
    warnings,
  };
}

/** Parquet: "PAR1" at both ends of the file (the footer's magic follows the metadata length). */
export async function parseParquet(
  path: string,
  size: number,
  config: ValidationConfig,
): Promise<ParseResult> {
  const ok =
    size >= 12 && (await readAt(path, 0, 4)).equals(PAR1) && (await readAt(path, size - 4, 4)).equals(PAR1);
  return signatureOnly(
    ok,
    ok ? 'Parquet magic at start and end' : 'no Parquet magic (PAR1) at both ends',
    'parquet',
    config,
  );
}

/** HDF5: the 8-byte signature at offset 0, or at 512, 1024, 2048, ... after a user block. */
export async function parseHdf5(path: string, size: number, config: ValidationConfig): Promise<ParseResult> {
  let found: number | null = null;
  for (let offset = 0; offset + 8 <= size; offset = offset === 0 ? 512 : offset * 2) {
    if ((await readAt(path, offset, 8)).equals(HDF5_SIGNATURE)) {
      found = offset;
      break;
    }
  }
  return signatureOnly(
    found !== null,
    found !== null ? `HDF5 signature at offset ${found}` : 'no HDF5 signature',
    'hdf5',
    config,
  );
}

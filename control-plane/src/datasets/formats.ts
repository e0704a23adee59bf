/** Dataset types and formats the spec names, and how each format announces itself in its first bytes. */

export const DATASET_TYPES = ['text', 'image', 'audio', 'video', 'structured', 'multimodal'] as const;
export type DatasetType = (typeof DATASET_TYPES)[number];

export const DATASET_FORMATS = ['jsonl', 'csv', 'parquet', 'hdf5', 'zip', 'tar'] as const;
export type DatasetFormat = (typeof DATASET_FORMATS)[number];

export const DATASET_STATUSES = ['uploading', 'processing', 'ready', 'error'] as const;
export type DatasetStatus = (typeof DATASET_STATUSES)[number];

export function isDatasetFormat(value: string): value is DatasetFormat {
  return (DATASET_FORMATS as readonly string[]).includes(value);
}

const ZIP = [0x50, 0x4b];
const GZIP = [0x1f, 0x8b];
const PARQUET = [0x50, 0x41, 0x52, 0x31]; // "PAR1"
export const HDF5_SIGNATURE = Buffer.from([0x89, 0x48, 0x44, 0x46, 0x0d, 0x0a, 0x1a, 0x0a]);

function startsWith(head: Buffer, magic: readonly number[]): boolean {
  return head.length >= magic.length && magic.every((byte, i) => head[i] === byte);
}

/**
 * What the first bytes say the file is, for the binary formats that carry a signature (null: none of
 * them, which is what text formats look like). Used to name a mismatch with the declared format.
 */
export function sniffBinaryFormat(head: Buffer): 'zip' | 'gzip' | 'parquet' | 'hdf5' | 'tar' | null {
  if (startsWith(head, ZIP)) return 'zip';
  if (startsWith(head, GZIP)) return 'gzip';
  if (startsWith(head, PARQUET)) return 'parquet';
  if (head.length >= 8 && head.subarray(0, 8).equals(HDF5_SIGNATURE)) return 'hdf5';
  // POSIX tar: "ustar" at offset 257 of the first header.
  if (head.length >= 262 && head.subarray(257, 262).toString('latin1') === 'ustar') return 'tar';
  return null;
}

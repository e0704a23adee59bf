import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, rmdir, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { type Readable, Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApiError } from '@anvil/shared';

/** What was written: its size and SHA-256 (lowercase hex), measured on the bytes as they went to disk. */
export interface StoredBytes {
  size: number;
  checksum: string;
}

const ID = /^[a-z]+_[a-z0-9]+$/;

/** Counts and hashes the bytes passing through, and stops the stream once they exceed the limit. */
class Measure extends Transform {
  readonly hash = createHash('sha256');
  size = 0;
  constructor(private readonly limit: number) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.size += chunk.length;
    if (this.size > this.limit) {
      callback(
        new ApiError('PAYLOAD_TOO_LARGE', `the upload is larger than the limit of ${this.limit} bytes`, {
          limitBytes: this.limit,
        }),
      );
      return;
    }
    this.hash.update(chunk);
    callback(null, chunk);
  }
}

/**
 * The dataset files on disk, one folder per dataset:
 *   <root>/<dataset id>/<version id>.data            the bytes of each completed upload
 *   <root>/<dataset id>/uploads/<upload id>/<n>.part  the parts of a multipart upload in progress
 * Everything is written to a temporary name in the same folder and renamed when complete, so a reader
 * (or a restarted control plane) never sees half a file under a final name.
 */
export class DatasetStorage {
  constructor(readonly root: string) {}

  datasetDir(datasetId: string): string {
    return join(this.root, safe(datasetId));
  }

  versionPath(datasetId: string, versionId: string): string {
    return join(this.datasetDir(datasetId), `${safe(versionId)}.data`);
  }

  uploadDir(datasetId: string, uploadId: string): string {
    return join(this.datasetDir(datasetId), 'uploads', safe(uploadId));
  }

  partPath(datasetId: string, uploadId: string, partNumber: number): string {
    return join(this.uploadDir(datasetId, uploadId), `${partNumber}.part`);
  }

  /** Streams `source` into `target` (atomically), measuring it; more than `limit` bytes fails with 413. */
  async write(source: Readable, target: string, limit: number): Promise<StoredBytes> {
    return this.writeFrom([source], target, limit);
  }

  /** Concatenates files into `target` (atomically), measuring the result: multipart assembly. */
  async concatenate(parts: string[], target: string, limit: number): Promise<StoredBytes> {
    return this.writeFrom(
      parts.map((path) => () => createReadStream(path)),
      target,
      limit,
    );
  }

  private async writeFrom(
    sources: Array<Readable | (() => Readable)>,
    target: string,
    limit: number,
  ): Promise<StoredBytes> {
    await mkdir(dirname(target), { recursive: true });
    const temporary = `${target}.tmp-${randomBytes(6).toString('hex')}`;
    const measure = new Measure(limit);
    const output = createWriteStream(temporary, { flags: 'wx', mode: 0o600 });
    try {
      await pipeline(
        async function* () {
          for (const source of sources) {
            const stream = typeof source === 'function' ? source() : source;
            for await (const chunk of stream) yield chunk as Buffer;
          }
        },
        measure,
        output,
      );
      await rename(temporary, target);
    } catch (error) {
      await unlink(temporary).catch(() => {});
      throw error;
    }
    return { size: measure.size, checksum: measure.hash.digest('hex') };
  }

  read(path: string, options: { start?: number; end?: number } = {}): Readable {
    return createReadStream(path, { ...options, highWaterMark: 256 * 1024 });
  }

  async sizeOf(path: string): Promise<number | null> {
    try {
      return (await stat(path)).size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }

  async removeDataset(datasetId: string): Promise<void> {
    await rm(this.datasetDir(datasetId), { recursive: true, force: true });
  }

  async removeUpload(datasetId: string, uploadId: string): Promise<void> {
    await rm(this.uploadDir(datasetId, uploadId), { recursive: true, force: true });
    // The uploads folder goes with its last upload; another upload still in progress keeps it.
    await rmdir(join(this.datasetDir(datasetId), 'uploads')).catch(() => {});
  }

  async removeFile(path: string): Promise<void> {
    await rm(path, { force: true });
  }
}

/** Ids become path segments: anything but `<prefix>_<base36>` would be a traversal bug upstream. */
function safe(id: string): string {
  if (!ID.test(id)) throw new Error(`not a storage id: ${JSON.stringify(id)}`);
  return id;
}

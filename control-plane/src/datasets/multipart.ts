import type { Readable } from 'node:stream';
import { ApiError, newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Dataset, DatasetUpload } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import type { DatasetQuota } from './quota.ts';
import type { DatasetService } from './service.ts';
import type { DatasetStorage } from './storage.ts';
import { newVersionId } from './versions.ts';
import { UPLOAD_BASE_PATH } from './view.ts';

/** S3's multipart limits: parts of 5 MiB to 5 GiB (the last may be smaller), at most 10,000 of them. */
export const MIN_PART_BYTES = 5 * 1024 ** 2;
export const MAX_PART_BYTES = 5 * 1024 ** 3;
export const MAX_PARTS = 10_000;
/** A multipart upload not completed within this long is aborted and its parts removed. */
export const UPLOAD_LIFETIME_MS = 7 * 24 * 3600 * 1000;
const SWEEP_INTERVAL_MS = 3600 * 1000;

export interface MultipartOptions {
  db: Database;
  clock: Clock;
  storage: DatasetStorage;
  datasets: DatasetService;
  publicUrl: string;
  maxBytes: number;
  quota: DatasetQuota;
  logger: Logger;
}

function uploadNotFound(uploadId: string): ApiError {
  return new ApiError('UPLOAD_NOT_FOUND', `multipart upload ${uploadId} not found or no longer active`, {
    uploadId,
  });
}

function invalid(field: string, reason: string, extra: Record<string, unknown> = {}): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason, ...extra });
}

/**
 * Multipart uploads, as S3 does them: initiate (declared size), PUT parts by number in any order and
 * in parallel (a part sent again replaces the earlier one), complete with the ordered list of part
 * numbers and their SHA-256 (the assembled file is checked against the declared size), or abort.
 */
export class MultipartUploads {
  private sweeper: NodeJS.Timeout | null = null;

  constructor(private readonly options: MultipartOptions) {}

  start(): void {
    void this.sweep();
    this.sweeper = setInterval(() => void this.sweep(), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  stop(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
  }

  private urls(datasetId: string, uploadId: string) {
    const base = `${this.options.publicUrl}${UPLOAD_BASE_PATH}/datasets/${datasetId}/multipart/${uploadId}`;
    return { partUrl: `${base}/parts/{partNumber}`, completeUrl: `${base}/complete`, abortUrl: base };
  }

  private view(
    upload: DatasetUpload,
    parts: Array<{ partNumber: number; sizeBytes: bigint; checksum: string; uploadedAt: Date }>,
  ) {
    const size = Number(upload.declaredSize);
    const partSize = Math.max(MIN_PART_BYTES, Math.ceil(size / MAX_PARTS), Math.min(size, 64 * 1024 ** 2));
    return {
      uploadId: upload.id,
      datasetId: upload.datasetId,
      filename: upload.filename,
      size,
      status: upload.status,
      partSize,
      partCount: Math.max(1, Math.ceil(size / partSize)),
      minPartSize: MIN_PART_BYTES,
      maxPartSize: MAX_PART_BYTES,
      maxParts: MAX_PARTS,
      createdAt: upload.createdAt.toISOString(),
      expiresAt: upload.expiresAt.toISOString(),
      ...this.urls(upload.datasetId, upload.id),
      parts: parts.map((p) => ({
        partNumber: p.partNumber,
        size: Number(p.sizeBytes),
        checksum: p.checksum,
        uploadedAt: p.uploadedAt.toISOString(),
      })),
    };
  }

  async initiate(dataset: Dataset, input: { filename: string; size: number }) {
    const { db, clock, maxBytes } = this.options;
    if (input.size > maxBytes)
      throw new ApiError('PAYLOAD_TOO_LARGE', `size exceeds the dataset limit of ${maxBytes} bytes`, {
        limitBytes: maxBytes,
        requestedSize: input.size,
      });
    if (input.size > MAX_PART_BYTES * MAX_PARTS)
      throw invalid('size', `exceeds ${MAX_PARTS} parts of ${MAX_PART_BYTES} bytes`);
    // The declared size is reserved against the quota until the upload completes or is aborted.
    await this.options.quota.check(dataset.accountId, input.size);
    const now = clock.now();
    const upload = await db.prisma.datasetUpload.create({
      data: {
        id: newId('dsup'),
        datasetId: dataset.id,
        filename: input.filename,
        declaredSize: BigInt(input.size),
        status: 'active',
        createdAt: now,
        expiresAt: new Date(now.getTime() + UPLOAD_LIFETIME_MS),
      },
    });
    this.options.logger.info(
      { dataset_id: dataset.id, upload_id: upload.id, size: input.size },
      'dataset multipart upload initiated',
    );
    return this.view(upload, []);
  }

  private async active(dataset: Dataset, uploadId: string): Promise<DatasetUpload> {
    const upload = await this.options.db.prisma.datasetUpload.findFirst({
      where: { id: uploadId, datasetId: dataset.id, status: 'active' },
    });
    if (!upload || upload.expiresAt.getTime() <= this.options.clock.now().getTime())
      throw uploadNotFound(uploadId);
    return upload;
  }

  async get(dataset: Dataset, uploadId: string) {
    const upload = await this.active(dataset, uploadId);
    const parts = await this.options.db.prisma.datasetUploadPart.findMany({
      where: { uploadId },
      orderBy: { partNumber: 'asc' },
    });
    return this.view(upload, parts);
  }

  async putPart(
    dataset: Dataset,
    uploadId: string,
    partNumber: number,
    body: Readable,
    contentLength: number | null,
  ) {
    const { db, clock, storage } = this.options;
    const upload = await this.active(dataset, uploadId);
    const limit = Math.min(MAX_PART_BYTES, Number(upload.declaredSize));
    this.options.datasets.checkDeclaredLength(contentLength, limit);
    const path = storage.partPath(dataset.id, uploadId, partNumber);
    const stored = await storage.write(body, path, limit);
    if (contentLength !== null && stored.size !== contentLength) {
      await storage.removeFile(path);
      throw invalid('body', `ended after ${stored.size} of ${contentLength} bytes`);
    }
    const row = { sizeBytes: BigInt(stored.size), checksum: stored.checksum, uploadedAt: clock.now() };
    await db.prisma.datasetUploadPart.upsert({
      where: { uploadId_partNumber: { uploadId, partNumber } },
      create: { uploadId, partNumber, ...row },
      update: row,
    });
    return { uploadId, partNumber, size: stored.size, checksum: stored.checksum };
  }

  async complete(
    dataset: Dataset,
    uploadId: string,
    listed: Array<{ partNumber: number; checksum: string }>,
  ) {
    const { db, storage, clock } = this.options;
    const upload = await this.active(dataset, uploadId);
    if (listed.length === 0) throw invalid('parts', 'must list at least one part');
    const stored = new Map(
      (await db.prisma.datasetUploadPart.findMany({ where: { uploadId } })).map((p) => [p.partNumber, p]),
    );
    let total = 0;
    for (let i = 0; i < listed.length; i++) {
      const { partNumber, checksum } = listed[i]!;
      if (i > 0 && partNumber <= listed[i - 1]!.partNumber)
        throw invalid('parts', 'must be in ascending partNumber order without repeats', { partNumber });
      const part = stored.get(partNumber);
      if (!part) throw invalid('parts', `lists part ${partNumber}, which was not uploaded`, { partNumber });
      if (part.checksum !== checksum.toLowerCase())
        throw invalid('parts', `part ${partNumber} checksum does not match the uploaded bytes`, {
          partNumber,
          expected: part.checksum,
        });
      const size = Number(part.sizeBytes);
      if (i < listed.length - 1 && size < MIN_PART_BYTES)
        throw invalid(
          'parts',
          `part ${partNumber} has ${size} bytes; every part but the last needs ${MIN_PART_BYTES}`,
          {
            partNumber,
          },
        );
      total += size;
    }
    if (total !== Number(upload.declaredSize))
      throw invalid('parts', `add up to ${total} bytes, the upload declared ${upload.declaredSize}`);
    // One completion wins: the row leaves `active` before the parts are read.
    const claimed = await db.prisma.datasetUpload.updateMany({
      where: { id: uploadId, status: 'active' },
      data: { status: 'completed', completedAt: clock.now() },
    });
    if (claimed.count === 0) throw uploadNotFound(uploadId);
    const versionId = newVersionId();
    const path = storage.versionPath(dataset.id, versionId);
    let assembled: Awaited<ReturnType<DatasetStorage['concatenate']>>;
    try {
      assembled = await storage.concatenate(
        listed.map((p) => storage.partPath(dataset.id, uploadId, p.partNumber)),
        path,
        this.options.maxBytes,
      );
    } catch (error) {
      await db.prisma.datasetUpload.updateMany({
        where: { id: uploadId },
        data: { status: 'active', completedAt: null },
      });
      throw error;
    }
    await db.prisma.datasetUploadPart.deleteMany({ where: { uploadId } });
    await storage.removeUpload(dataset.id, uploadId);
    return this.options.datasets.completeUpload(dataset, versionId, path, assembled, 'multipart');
  }

  async abort(dataset: Dataset, uploadId: string) {
    await this.active(dataset, uploadId);
    await this.discard(dataset.id, uploadId);
    return { uploadId, datasetId: dataset.id, status: 'aborted' as const };
  }

  private async discard(datasetId: string, uploadId: string): Promise<void> {
    const { db, storage } = this.options;
    await db.prisma.datasetUpload.updateMany({
      where: { id: uploadId, status: 'active' },
      data: { status: 'aborted' },
    });
    await db.prisma.datasetUploadPart.deleteMany({ where: { uploadId } });
    await storage.removeUpload(datasetId, uploadId);
  }

  /** Aborts expired uploads so their parts do not fill the disk. */
  async sweep(): Promise<void> {
    try {
      const expired = await this.options.db.prisma.datasetUpload.findMany({
        where: { status: 'active', expiresAt: { lte: this.options.clock.now() } },
        select: { id: true, datasetId: true },
        take: 500,
      });
      for (const upload of expired) {
        await this.discard(upload.datasetId, upload.id);
        this.options.logger.info(
          { dataset_id: upload.datasetId, upload_id: upload.id },
          'expired multipart upload aborted',
        );
      }
    } catch (error) {
      this.options.logger.error({ err: error }, 'sweeping expired multipart uploads failed');
    }
  }
}

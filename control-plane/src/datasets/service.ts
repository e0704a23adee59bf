import type { Readable } from 'node:stream';
import { ApiError, newId } from '@anvil/shared';
import type { AccessControl, Actor } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import type { Dataset, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { listOrderBy } from '../util/list-order.ts';
import { checkDatasetUrl } from './fetch-url.ts';
import { DATASET_FORMATS, type DatasetType, isDatasetFormat } from './formats.ts';
import type { DatasetProcessor } from './processing.ts';
import type { DatasetQuota } from './quota.ts';
import type { DatasetStorage } from './storage.ts';
import { newUploadToken, uploadTokenMatches } from './tokens.ts';
import type { ValidationConfig } from './validation-config.ts';
import { newVersionId, recordVersion } from './versions.ts';
import { viewDataset, viewDatasetSummary } from './view.ts';

/** Largest single PUT, as S3's: above it, multipart. */
export const MAX_SINGLE_UPLOAD_BYTES = 5 * 1024 ** 3;

export interface CreateDatasetInput {
  name: string;
  type?: string | undefined;
  format?: string | undefined;
  description?: string | undefined;
  tags?: string[] | undefined;
  validation?: ValidationConfig | undefined;
  preprocessing?: Record<string, unknown> | undefined;
  metadata?: Record<string, unknown> | undefined;
  dataUrl?: string | undefined;
  splitRatio?: { train: number; validation: number; test: number } | undefined;
}

export interface UpdateDatasetInput {
  name?: string | undefined;
  description?: string | null | undefined;
  tags?: string[] | undefined;
  metadata?: Record<string, unknown> | undefined;
}

export interface ListDatasetsQuery {
  type?: string | undefined;
  status?: string | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
  sort?: 'created_at' | 'updated_at' | 'name' | 'size' | undefined;
  order?: 'asc' | 'desc' | undefined;
}

export interface DatasetDownload {
  path: string;
  sizeBytes: number;
  /** SHA-256 of the bytes, lowercase hex. */
  checksum: string;
  fileName: string;
}

export interface DatasetServiceOptions {
  db: Database;
  /** Member-level permissions: datasets feed training, so the role's clusters scope covers them (roles.ts). */
  access: Pick<AccessControl, 'require' | 'load' | 'decide'>;
  clock: Clock;
  storage: DatasetStorage;
  processor: DatasetProcessor;
  publicUrl: string;
  maxBytes: number;
  tokenSeconds: number;
  allowPrivate: boolean;
  quota: DatasetQuota;
  logger: Logger;
}

const json = (value: unknown) => value as Prisma.InputJsonValue;

function notFound(datasetId: string): ApiError {
  return new ApiError('DATASET_NOT_FOUND', `dataset ${datasetId} not found`, { datasetId });
}

function invalid(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason });
}

/** Contradictions the schema cannot express; each answers 400 naming the field. */
function checkValidationConfig(config: ValidationConfig): void {
  const pairs = [
    ['min_examples', 'max_examples'],
    ['min_sequence_length', 'max_sequence_length'],
  ] as const;
  for (const [min, max] of pairs) {
    const low = config[min];
    const high = config[max];
    if (low !== undefined && high !== undefined && low > high)
      throw invalid(`validation.${min}`, `is greater than validation.${max}`);
  }
  const encoding = config.encoding?.toLowerCase().replace('_', '-');
  if (encoding !== undefined && encoding !== 'utf-8' && encoding !== 'utf8')
    throw invalid('validation.encoding', 'must be utf-8 (the only encoding Anvil checks)');
}

/**
 * Training datasets of an account: rows, their upload tokens, single-PUT uploads and deletion. Every
 * read is scoped to the caller's account: another account's id answers 404 DATASET_NOT_FOUND.
 */
export class DatasetService {
  constructor(private readonly options: DatasetServiceOptions) {}

  private get db() {
    return this.options.db;
  }

  /** The caller's role must hold `permission` on the clusters scope (a key's own scope is checked earlier). */
  async requireAccess(actor: Actor, permission: 'read' | 'write'): Promise<void> {
    await this.options.access.require(actor, { permission, scope: 'clusters' });
  }

  async create(actor: Actor, input: CreateDatasetInput) {
    await this.requireAccess(actor, 'write');
    const { clock, processor, tokenSeconds } = this.options;
    const name = input.name.trim();
    if (name === '') throw invalid('name', 'must not be blank');
    const short = input.dataUrl !== undefined;
    let format = input.format ?? (short ? 'json' : undefined);
    if (short && format === 'json') format = 'jsonl';
    if (format === undefined) throw invalid('format', 'is required');
    if (!isDatasetFormat(format)) {
      throw new ApiError('UNSUPPORTED_FORMAT', `format ${format} is not supported`, {
        providedFormat: input.format,
        supportedFormats: short ? ['json', ...DATASET_FORMATS] : [...DATASET_FORMATS],
      });
    }
    const type: DatasetType | undefined =
      (input.type as DatasetType | undefined) ?? (short ? 'text' : undefined);
    if (type === undefined) throw invalid('type', 'is required');
    const validation = input.validation ?? {};
    checkValidationConfig(validation);
    if (input.splitRatio) {
      const { train, validation: val, test } = input.splitRatio;
      if (Math.abs(train + val + test - 1) > 1e-6) throw invalid('splitRatio', 'must add up to 1');
    }
    const sourceUrl = short ? checkDatasetUrl(input.dataUrl!, this.options.allowPrivate).toString() : null;
    const now = clock.now();
    const { token, hash } = newUploadToken();
    const row = await this.db.prisma.dataset.create({
      data: {
        id: newId('ds'),
        accountId: actor.principal.accountId,
        createdById: actor.principal.userId,
        name,
        description: input.description ?? null,
        type,
        format,
        status: 'uploading',
        tags: input.tags ?? [],
        validationConfig: json(validation),
        preprocessing: json(input.preprocessing ?? {}),
        metadata: json(input.metadata ?? {}),
        sourceUrl,
        splitRatio: input.splitRatio ? json(input.splitRatio) : undefined,
        uploadTokenHash: hash,
        uploadTokenExpiresAt: new Date(now.getTime() + tokenSeconds * 1000),
        createdAt: now,
        updatedAt: now,
      },
    });
    this.options.logger.info(
      { dataset_id: row.id, account_id: row.accountId, format, short },
      'dataset created',
    );
    if (sourceUrl) processor.enqueue('fetch', row.id);
    const view = viewDataset(row, [], this.options.publicUrl);
    return short ? { ...view, datasetId: row.id } : { ...view, uploadToken: token };
  }

  async find(accountId: string, datasetId: string): Promise<Dataset> {
    const row = await this.db.prisma.dataset.findFirst({ where: { id: datasetId, accountId } });
    if (!row) throw notFound(datasetId);
    return row;
  }

  /**
   * The stored bytes of one version (the current one when `versionId` is absent) for a download: where they
   * are, how many, their SHA-256 and a file name made of the dataset's name and format.
   */
  async download(actor: Actor, datasetId: string, versionId?: string): Promise<DatasetDownload> {
    await this.requireAccess(actor, 'read');
    const row = await this.find(actor.principal.accountId, datasetId);
    // Without a version asked for, the dataset's current one: what training jobs read (dataset-files.ts).
    const wanted = versionId ?? row.currentVersionId;
    const version = wanted
      ? await this.db.prisma.datasetVersion.findFirst({ where: { datasetId: row.id, id: wanted } })
      : null;
    if (!version) {
      if (versionId) {
        throw new ApiError('NOT_FOUND', `dataset ${datasetId} has no version ${versionId}`, {
          datasetId,
          versionId,
        });
      }
      throw new ApiError('INVALID_STATE', `dataset ${datasetId} has no uploaded bytes yet (${row.status})`, {
        datasetId,
        status: row.status,
      });
    }
    const base = row.name.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^[._]+/, '') || row.id;
    return {
      path: this.options.storage.versionPath(row.id, version.id),
      sizeBytes: Number(version.sizeBytes),
      checksum: version.checksum,
      fileName: `${base}.${row.format}`,
    };
  }

  async get(actor: Actor, datasetId: string) {
    await this.requireAccess(actor, 'read');
    const row = await this.find(actor.principal.accountId, datasetId);
    return this.view(row);
  }

  async view(row: Dataset) {
    const versions = await this.db.prisma.datasetVersion.findMany({
      where: { datasetId: row.id },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    return viewDataset(row, versions, this.options.publicUrl);
  }

  async list(actor: Actor, query: ListDatasetsQuery) {
    await this.requireAccess(actor, 'read');
    const limit = query.limit ?? 50;
    const offset = query.offset ?? 0;
    const direction = query.order ?? 'desc';
    const where: Prisma.DatasetWhereInput = {
      accountId: actor.principal.accountId,
      ...(query.type ? { type: query.type } : {}),
      ...(query.status ? { status: query.status } : {}),
    };
    const [total, rows] = await Promise.all([
      this.db.prisma.dataset.count({ where }),
      this.db.prisma.dataset.findMany({
        where,
        orderBy: listOrderBy(query.sort, direction, {
          size: { sizeBytes: { sort: direction, nulls: 'last' as const } },
        }),
        take: limit,
        skip: offset,
      }),
    ]);
    return {
      datasets: rows.map(viewDatasetSummary),
      pagination: { total, limit, offset, hasMore: offset + rows.length < total },
    };
  }

  async update(actor: Actor, datasetId: string, input: UpdateDatasetInput) {
    await this.requireAccess(actor, 'write');
    const row = await this.find(actor.principal.accountId, datasetId);
    const data: Prisma.DatasetUpdateManyMutationInput = {};
    if (input.name !== undefined) {
      const name = input.name.trim();
      if (name === '') throw invalid('name', 'must not be blank');
      data.name = name;
    }
    if (input.description !== undefined) data.description = input.description;
    if (input.tags !== undefined) data.tags = input.tags;
    if (input.metadata !== undefined) data.metadata = json(input.metadata);
    if (Object.keys(data).length > 0) {
      data.updatedAt = this.options.clock.now();
      const changed = await this.db.prisma.dataset.updateMany({
        where: { id: row.id, accountId: row.accountId },
        data,
      });
      if (changed.count === 0) throw notFound(datasetId);
    }
    return this.view(await this.find(actor.principal.accountId, datasetId));
  }

  async delete(actor: Actor, datasetId: string) {
    await this.requireAccess(actor, 'write');
    const row = await this.find(actor.principal.accountId, datasetId);
    await this.assertNotUsedByTrainingJobs(row);
    // Rows first: a crash between the two leaves unreferenced files, never a dataset without bytes.
    const deleted = await this.db.prisma.dataset.deleteMany({
      where: { id: row.id, accountId: row.accountId },
    });
    if (deleted.count === 0) throw notFound(datasetId);
    await this.options.storage.removeDataset(row.id);
    this.options.logger.info({ dataset_id: row.id, account_id: row.accountId }, 'dataset deleted');
    return { id: row.id, deleted: true, deletedAt: this.options.clock.now().toISOString() };
  }

  /**
   * Spec: "A dataset used by a training job cannot be deleted": any job of the account naming it (a
   * finished job can still be resumed, and its record says what it trained on) answers 409 DATASET_IN_USE
   * naming the jobs (the first 20).
   */
  private async assertNotUsedByTrainingJobs(row: Dataset): Promise<void> {
    const jobs = await this.db.prisma.trainingJob.findMany({
      where: { datasetId: row.id, accountId: row.accountId },
      select: { id: true },
      orderBy: { createdAt: 'asc' },
      take: 20,
    });
    if (jobs.length === 0) return;
    throw new ApiError('DATASET_IN_USE', `dataset ${row.id} is used by training jobs`, {
      datasetId: row.id,
      trainingJobIds: jobs.map((j) => j.id),
    });
  }

  /**
   * The dataset an upload token opens, or 401: unknown dataset, another dataset's token and a wrong
   * token read the same (no oracle for dataset ids); an expired token says so.
   */
  async openWithToken(datasetId: string, token: string): Promise<Dataset> {
    const row = await this.db.prisma.dataset.findUnique({ where: { id: datasetId } });
    if (!row || !uploadTokenMatches(token, row.uploadTokenHash)) {
      throw new ApiError('UNAUTHORIZED', 'the upload token is not valid for this dataset', { datasetId });
    }
    if (row.uploadTokenExpiresAt.getTime() <= this.options.clock.now().getTime()) {
      throw new ApiError('UNAUTHORIZED', 'the upload token has expired; upload with an API key instead', {
        datasetId,
        expiredAt: row.uploadTokenExpiresAt.toISOString(),
      });
    }
    await this.assertCreatorMayWrite(row);
    return row;
  }

  /**
   * An upload token acts for the member who created its dataset, so it dies with their write access:
   * removed, suspended, or moved to a role that may not write datasets. (A deleted dataset takes its token
   * hash with its row.) Checked on every use, so the next request after the change is refused.
   */
  private async assertCreatorMayWrite(row: Dataset): Promise<void> {
    const { access } = this.options;
    const member = await access.load(row.accountId, row.createdById);
    const decision = member ? await access.decide(member, 'write', 'clusters') : null;
    if (decision?.allowed) return;
    throw new ApiError(
      'UNAUTHORIZED',
      'the upload token is no longer valid: the member who created the dataset may no longer write datasets',
      { datasetId: row.id, reason: decision?.reason ?? 'member removed' },
    );
  }

  /** Largest upload still accepted for this request (the dataset limit and the single-PUT limit). */
  checkDeclaredLength(contentLength: number | null, limit: number): void {
    if (contentLength !== null && contentLength > limit) {
      throw new ApiError('PAYLOAD_TOO_LARGE', `the upload is larger than the limit of ${limit} bytes`, {
        limitBytes: limit,
        contentLength,
      });
    }
  }

  /** A single-PUT upload: the bytes become a new version, then a processing pass runs over them. */
  async upload(dataset: Dataset, body: Readable, contentLength: number | null) {
    const { storage, maxBytes } = this.options;
    const limit = Math.min(maxBytes, MAX_SINGLE_UPLOAD_BYTES);
    this.checkDeclaredLength(contentLength, limit);
    await this.options.quota.check(dataset.accountId, contentLength ?? 0);
    const versionId = newVersionId();
    const path = storage.versionPath(dataset.id, versionId);
    const stored = await storage.write(body, path, limit);
    try {
      if (contentLength !== null && stored.size !== contentLength)
        throw invalid('body', `ended after ${stored.size} of ${contentLength} bytes`);
      // A chunked body declared nothing: its real size is checked now.
      if (contentLength === null) await this.options.quota.check(dataset.accountId, stored.size);
    } catch (error) {
      await storage.removeFile(path);
      throw error;
    }
    return this.completeUpload(dataset, versionId, path, stored, 'put');
  }

  /** A stored file becomes the dataset's newest version (single PUT or assembled multipart). */
  async completeUpload(
    dataset: Dataset,
    versionId: string,
    path: string,
    stored: { size: number; checksum: string },
    source: 'put' | 'multipart',
  ) {
    const { storage, db, clock, processor } = this.options;
    const version = await recordVersion(db, clock, dataset.id, versionId, stored, source);
    if (!version) {
      await storage.removeFile(path);
      throw notFound(dataset.id);
    }
    this.options.logger.info(
      { dataset_id: dataset.id, version_id: versionId, bytes: stored.size, source },
      'dataset upload stored',
    );
    processor.enqueue('process', dataset.id);
    return {
      datasetId: dataset.id,
      status: 'processing' as const,
      version: {
        id: version.id,
        createdAt: version.createdAt.toISOString(),
        size: version.size,
        checksum: version.checksum,
        source,
      },
    };
  }
}

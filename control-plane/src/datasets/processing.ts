import { addAbortSignal } from 'node:stream';
import type { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { analyze } from './analyze.ts';
import { openDatasetUrl } from './fetch-url.ts';
import type { DatasetFormat } from './formats.ts';
import type { DatasetQuota } from './quota.ts';
import type { DatasetStorage } from './storage.ts';
import type { ValidationConfig } from './validation-config.ts';
import { newVersionId, recordVersion } from './versions.ts';

const json = (value: unknown) => value as Prisma.InputJsonValue;

export interface ProcessorOptions {
  db: Database;
  clock: Clock;
  storage: DatasetStorage;
  logger: Logger;
  maxBytes: number;
  allowPrivate: boolean;
  quota: DatasetQuota;
}

type Job = { kind: 'process' | 'fetch'; datasetId: string };

/**
 * Runs the passes over stored bytes (and the downloads of the short creation form), one at a time so a
 * large file does not take both cores of a small control plane. The queue lives in memory but its
 * truth is the database: at start every dataset left in `processing`, and every URL dataset whose
 * download never completed, is queued again, so a restart in the middle loses nothing.
 */
export class DatasetProcessor {
  private readonly queue: Job[] = [];
  private readonly queued = new Set<string>();
  private running: Promise<void> | null = null;
  private stopped = false;
  private abort = new AbortController();
  private idleWaiters: Array<() => void> = [];

  constructor(private readonly options: ProcessorOptions) {}

  async start(): Promise<void> {
    this.stopped = false;
    this.abort = new AbortController();
    const { db } = this.options;
    const processing = await db.prisma.dataset.findMany({
      where: { status: 'processing' },
      select: { id: true },
      orderBy: { updatedAt: 'asc' },
    });
    const downloads = await db.prisma.dataset.findMany({
      where: { status: 'uploading', sourceUrl: { not: null }, currentVersionId: null },
      select: { id: true },
      orderBy: { createdAt: 'asc' },
    });
    for (const row of downloads) this.enqueue('fetch', row.id);
    for (const row of processing) this.enqueue('process', row.id);
    if (processing.length + downloads.length > 0)
      this.options.logger.info(
        { processing: processing.length, downloads: downloads.length },
        'datasets resumed after start',
      );
  }

  /**
   * Stops taking jobs and interrupts the current pass (a large file would hold shutdown for minutes);
   * the interrupted dataset stays in `processing` and the next start processes it again.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.queue.length = 0;
    this.queued.clear();
    this.abort.abort();
    await this.running;
  }

  enqueue(kind: Job['kind'], datasetId: string): void {
    if (this.stopped) return;
    const key = `${kind}:${datasetId}`;
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.queue.push({ kind, datasetId });
    this.running ??= this.drain();
  }

  /** Resolves when the queue is empty and nothing runs (tests wait on it). */
  idle(): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private async drain(): Promise<void> {
    try {
      for (let job = this.queue.shift(); job && !this.stopped; job = this.queue.shift()) {
        this.queued.delete(`${job.kind}:${job.datasetId}`);
        const log = this.options.logger.child({ dataset_id: job.datasetId });
        try {
          if (job.kind === 'fetch') await this.fetch(job.datasetId, log);
          else await this.process(job.datasetId, log);
        } catch (error) {
          if (this.stopped) {
            log.info({ job: job.kind }, 'dataset job interrupted by shutdown; it resumes at the next start');
            break;
          }
          log.error({ err: error, job: job.kind }, 'dataset job failed');
          // The cause stays in the log (it may name paths); the caller sees that the pass failed.
          await this.fail(
            job.datasetId,
            'INTERNAL_ERROR',
            'processing failed; the operator log has the cause',
            {},
          );
        }
      }
    } finally {
      this.running = null;
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  private async process(datasetId: string, log: Logger): Promise<void> {
    const { db, storage, clock } = this.options;
    const row = await db.prisma.dataset.findUnique({ where: { id: datasetId } });
    if (row?.status !== 'processing' || !row.currentVersionId) return;
    const versionId = row.currentVersionId;
    const version = await db.prisma.datasetVersion.findUnique({ where: { id: versionId } });
    const path = storage.versionPath(datasetId, versionId);
    if ((await storage.sizeOf(path)) === null) {
      log.error({ version_id: versionId, path }, 'dataset bytes missing on disk');
      await this.fail(datasetId, 'VALIDATION_FAILED', 'the stored bytes of this version are missing', {
        field: 'storage',
        reason: `no file for version ${versionId}`,
        examples: [],
      });
      return;
    }
    const started = Date.now();
    log.info({ version_id: versionId, format: row.format }, 'dataset processing started');
    const analysis = await analyze(
      path,
      row.format as DatasetFormat,
      row.validationConfig as ValidationConfig,
      version?.checksum ?? null,
      this.abort.signal,
    );
    // Only the version that was analysed is written: a newer upload meanwhile has its own pass queued.
    const written = await db.prisma.dataset.updateMany({
      where: { id: datasetId, status: 'processing', currentVersionId: versionId },
      data: {
        status: analysis.status,
        sizeBytes: BigInt(analysis.sizeBytes),
        checksum: analysis.checksum,
        examples: analysis.examples === null ? null : BigInt(analysis.examples),
        compressedBytes: analysis.compressedBytes === null ? null : BigInt(analysis.compressedBytes),
        schema: analysis.schema === null ? Prisma.DbNull : json(analysis.schema),
        statistics: json(analysis.statistics),
        validationResult: json({
          status: analysis.status === 'ready' ? 'passed' : 'failed',
          checks: analysis.checks,
          warnings: analysis.warnings,
        }),
        error: analysis.error === null ? Prisma.DbNull : json(analysis.error),
        processedAt: clock.now(),
        updatedAt: clock.now(),
      },
    });
    log.info(
      {
        version_id: versionId,
        status: analysis.status,
        examples: analysis.examples,
        bytes: analysis.sizeBytes,
        duration_ms: Date.now() - started,
        superseded: written.count === 0,
        error_code: analysis.error?.code,
      },
      'dataset processed',
    );
  }

  private async fetch(datasetId: string, log: Logger): Promise<void> {
    const { db, storage, clock } = this.options;
    const row = await db.prisma.dataset.findUnique({ where: { id: datasetId } });
    if (!row?.sourceUrl || row.currentVersionId || row.status !== 'uploading') return;
    const versionId = newVersionId();
    const path = storage.versionPath(datasetId, versionId);
    log.info({ url: row.sourceUrl }, 'dataset download started');
    let stored: Awaited<ReturnType<DatasetStorage['write']>>;
    try {
      const response = await openDatasetUrl(row.sourceUrl, this.options.allowPrivate);
      stored = await storage.write(addAbortSignal(this.abort.signal, response), path, this.options.maxBytes);
    } catch (error) {
      // Interrupted by shutdown: the dataset still has no version, so the next start downloads it again.
      if (this.stopped) throw error;
      const reason = (error as Error).message;
      log.warn({ url: row.sourceUrl, reason }, 'dataset download failed');
      // Size-limit refusals (413 from storage) and network or HTTP failures alike end the download.
      await this.fail(datasetId, 'FETCH_FAILED', `downloading dataUrl failed: ${reason}`, {
        url: row.sourceUrl,
        reason,
      });
      return;
    }
    try {
      await this.options.quota.check(row.accountId, stored.size);
    } catch (error) {
      await storage.removeFile(path);
      const refusal = error as ApiError;
      log.warn({ bytes: stored.size }, 'dataset download over the storage quota');
      await this.fail(datasetId, 'QUOTA_EXCEEDED', refusal.message, refusal.details ?? {});
      return;
    }
    const version = await recordVersion(db, clock, datasetId, versionId, stored, 'url');
    if (!version) {
      await storage.removeFile(path);
      return;
    }
    log.info({ version_id: versionId, bytes: stored.size }, 'dataset downloaded');
    await this.process(datasetId, log);
  }

  private async fail(datasetId: string, code: string, message: string, details: Record<string, unknown>) {
    const now = this.options.clock.now();
    await this.options.db.prisma.dataset.updateMany({
      where: { id: datasetId },
      data: { status: 'error', error: json({ code, message, details }), processedAt: now, updatedAt: now },
    });
  }
}

import type { Clock } from '../auth/clock.ts';
import type { Config } from '../config.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { MultipartUploads } from './multipart.ts';
import { DatasetProcessor } from './processing.ts';
import { DatasetQuota } from './quota.ts';
import { DatasetService, type DatasetServiceOptions } from './service.ts';
import { DatasetStorage } from './storage.ts';

export { UPLOAD_BASE_PATH } from './view.ts';

export interface Datasets {
  service: DatasetService;
  multipart: MultipartUploads;
  processor: DatasetProcessor;
  storage: DatasetStorage;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Training datasets: storage on disk, rows, upload tokens, multipart uploads and the processing pass. */
export function createDatasets(options: {
  config: Config;
  db: Database;
  access: DatasetServiceOptions['access'];
  clock: Clock;
  logger: Logger;
}): Datasets {
  const { config, db, clock, logger, access } = options;
  const storage = new DatasetStorage(config.datasetsDir);
  const quota = new DatasetQuota(db, config.datasetQuotaBytes);
  const processor = new DatasetProcessor({
    db,
    clock,
    storage,
    logger,
    maxBytes: config.datasetMaxBytes,
    allowPrivate: config.outboundAllowPrivate,
    quota,
  });
  const service = new DatasetService({
    db,
    access,
    clock,
    storage,
    processor,
    publicUrl: config.publicUrl,
    maxBytes: config.datasetMaxBytes,
    tokenSeconds: config.datasetUploadTokenSeconds,
    allowPrivate: config.outboundAllowPrivate,
    quota,
    logger,
  });
  const multipart = new MultipartUploads({
    db,
    clock,
    storage,
    datasets: service,
    publicUrl: config.publicUrl,
    maxBytes: config.datasetMaxBytes,
    quota,
    logger,
  });
  return {
    service,
    multipart,
    processor,
    storage,
    async start() {
      await processor.start();
      multipart.start();
    },
    async stop() {
      multipart.stop();
      await processor.stop();
    },
  };
}

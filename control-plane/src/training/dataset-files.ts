import { readFile } from 'node:fs/promises';
import type { SecretFile, WorkloadSpec } from '@anvil/shared/protocol';
import type { DatasetStorage } from '../datasets/storage.ts';
import type { Database } from '../db/index.ts';
import type { SpecResolver } from '../workloads/workloads.ts';
import { CODE_PATH, DATASET_DIR } from './contract.ts';

/**
 * Largest dataset written into a trainer's container. The bytes travel in the host's desired set, which
 * is one WebSocket frame (MAX_FRAME_BYTES, 4 MiB, base64 adds a third): larger datasets are not delivered
 * (ANVIL_DATASET_FILE then names a file that does not exist).
 */
export const MAX_INLINE_DATASET_BYTES = 1024 * 1024;

const READ_ONLY = 0o444;

/**
 * Completes training workloads' specs as the desired set is sent (nothing of it is stored): the dataset's
 * current version at ANVIL_DATASET_FILE and short-form customCode at CODE_PATH, both read-only.
 */
export function trainingSpecResolver(db: Database, storage: DatasetStorage): SpecResolver {
  const cache = new Map<string, string>();
  return async (spec, workload) => {
    if (workload.kind !== 'training') return spec;
    const jobId = spec.labels['anvil.training-job'];
    if (!jobId) return spec;
    const job = await db.prisma.trainingJob.findUnique({
      where: { id: jobId },
      select: { datasetId: true, config: true },
    });
    if (!job) return spec;
    const files: SecretFile[] = [...(spec.files ?? [])];
    const customCode = (
      (job.config as Record<string, unknown>)['modelConfig'] as { customCode?: unknown } | undefined
    )?.customCode;
    if (typeof customCode === 'string') {
      files.push({
        path: CODE_PATH,
        mode: READ_ONLY,
        contentBase64: Buffer.from(customCode).toString('base64'),
      });
    }
    const dataset = job.datasetId
      ? await db.prisma.dataset.findUnique({
          where: { id: job.datasetId },
          select: { id: true, format: true, currentVersionId: true, sizeBytes: true },
        })
      : null;
    if (
      dataset?.currentVersionId &&
      dataset.sizeBytes !== null &&
      dataset.sizeBytes <= MAX_INLINE_DATASET_BYTES
    ) {
      const key = dataset.currentVersionId;
      let content = cache.get(key);
      if (content === undefined) {
        content = (await readFile(storage.versionPath(dataset.id, key))).toString('base64');
        if (cache.size > 32) cache.clear();
        cache.set(key, content);
      }
      files.push({ path: `${DATASET_DIR}/data.${dataset.format}`, mode: READ_ONLY, contentBase64: content });
    }
    return files.length > 0 ? ({ ...spec, files } satisfies WorkloadSpec) : spec;
  };
}

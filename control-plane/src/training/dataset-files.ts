import {
  AGENT_DOWNLOAD_PATH,
  type SecretFile,
  type WorkloadDownload,
  type WorkloadSpec,
} from '@anvil/shared/protocol';
import type { Database } from '../db/index.ts';
import type { SpecResolver } from '../fleet/workloads/workloads.ts';
import { CODE_PATH, DATASET_DIR } from './contract.ts';

const READ_ONLY = 0o444;

/** Where an agent fetches a dataset version (served by api/agent-downloads/agent-downloads.routes.ts). */
export function datasetDownloadPath(datasetId: string, versionId: string): string {
  return `${AGENT_DOWNLOAD_PATH}/datasets/${encodeURIComponent(datasetId)}/versions/${encodeURIComponent(versionId)}`;
}

/**
 * Completes training workloads' specs as the desired set is sent (nothing of it is stored):
 * - the dataset's current version as a download (WorkloadDownload): the agent fetches it once per
 *   SHA-256 with its host credential, checks it and bind-mounts it read-only at ANVIL_DATASET_FILE,
 *   so its size is bounded by the host's disk, not by the desired set's frame;
 * - short-form customCode as a file at CODE_PATH, read-only.
 */
export function trainingSpecResolver(db: Database): SpecResolver {
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
    const downloads: WorkloadDownload[] = [...(spec.downloads ?? [])];
    const dataset = job.datasetId
      ? await db.prisma.dataset.findUnique({
          where: { id: job.datasetId },
          select: { id: true, format: true, currentVersionId: true },
        })
      : null;
    const version = dataset?.currentVersionId
      ? await db.prisma.datasetVersion.findUnique({
          where: { id: dataset.currentVersionId },
          select: { id: true, sizeBytes: true, checksum: true },
        })
      : null;
    if (dataset && version) {
      downloads.push({
        path: datasetDownloadPath(dataset.id, version.id),
        sha256: version.checksum,
        sizeBytes: Number(version.sizeBytes),
        containerPath: `${DATASET_DIR}/data.${dataset.format}`,
      });
    }
    return { ...spec, files, downloads } satisfies WorkloadSpec;
  };
}

import type { WorkloadSpec } from '@anvil/shared/protocol';
import type { ContainerStateListener, SpecResolver } from '../fleet/workloads/workloads.ts';
import type { Logger } from '../logger.ts';
import type { StoredPermissions } from './rules.ts';
import type { SecretService } from './secrets.ts';

/**
 * Contract 5: a cluster's secrets reach its container. The spec resolver fills `secretEnv`
 * (environment_variable → value) and `files` (file_path, file_mode, value) of kind `cluster` workloads
 * each time the desired set is sent; nothing of it is stored. Expired secrets are left out.
 * `read_only` (the default) clears the write bits of the file's mode.
 *
 * A secret that fails to open (a key missing from the configuration) is left out and logged by name,
 * so one bad row cannot keep a host from receiving its desired set.
 */
export function secretSpecResolver(secrets: SecretService, logger: Logger): SpecResolver {
  return async (spec, workload) => {
    if (workload.kind !== 'cluster') return spec;
    const rows = await secrets.injectable(workload.ownerAccountId, workload.id);
    if (rows.length === 0) return spec;
    const secretEnv: Record<string, string> = {};
    const files: NonNullable<WorkloadSpec['files']> = [];
    for (const row of rows) {
      let value: string;
      try {
        value = secrets.openForInjection(row);
      } catch (error) {
        logger.error(
          { clusterId: row.clusterId, secret: row.name, err: (error as Error).message },
          'a cluster secret could not be opened; it is not injected',
        );
        continue;
      }
      if (row.environmentVariable) secretEnv[row.environmentVariable] = value;
      if (row.filePath) {
        const permissions = row.permissions as unknown as StoredPermissions;
        const mode = permissions.read_only ? permissions.file_mode & ~0o222 : permissions.file_mode;
        files.push({
          path: row.filePath,
          mode,
          contentBase64: Buffer.from(value, 'utf8').toString('base64'),
        });
      }
    }
    return { ...spec, secretEnv, files };
  };
}

/**
 * usage_statistics of injected secrets: each time the agent reports the cluster's container entering
 * `running` (created and started with the secrets, or started again with the files rewritten), every
 * secret injected into it counts one access.
 */
export function secretInjectionCounter(secrets: SecretService, logger: Logger): ContainerStateListener {
  return async ({ workloadId }, change) => {
    if (change.phase !== 'running' || !workloadId.startsWith('cluster_')) return;
    try {
      const cluster = await secrets.clusterOwner(workloadId);
      if (!cluster) return;
      const rows = await secrets.injectable(cluster.accountId, workloadId);
      await secrets.recordAccess(rows.map((r) => r.id));
    } catch (error) {
      logger.warn(
        { clusterId: workloadId, err: (error as Error).message },
        'counting secret injections failed',
      );
    }
  };
}

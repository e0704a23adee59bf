import type { SettingsService } from '../accounts/settings.ts';
import type { SpecResolver } from '../fleet/workloads/workloads.ts';
import type { Logger } from '../logger.ts';
import { type RegistrySetting, registryAuthFor } from './registry-auth.ts';
import { isSnapshotImage } from './snapshot-images.ts';

/**
 * Fills `registryAuth` of every workload as its host's desired set is sent: the owning account's
 * credentials from `integrations.docker.registries` (used while `integrations.docker.enabled` is true)
 * when the image's registry host matches one. The token is opened here, only for the message, and never
 * stored in the spec or logged. Snapshot images are never pulled, so they get none.
 *
 * Settings that cannot be read (a key missing from the configuration) leave the pull anonymous and are
 * logged, so one bad row cannot keep a host from receiving its desired set.
 */
export function registryAuthResolver(
  settings: Pick<SettingsService, 'effective'>,
  logger: Logger,
): SpecResolver {
  return async (spec, workload) => {
    if (isSnapshotImage(spec.image) || !workload.ownerAccountId) return spec;
    let registries: RegistrySetting[] = [];
    try {
      const docker = (await settings.effective(workload.ownerAccountId)).integrations['docker'] as
        | { enabled?: boolean; registries?: RegistrySetting[] }
        | undefined;
      if (docker?.enabled) registries = docker.registries ?? [];
    } catch (error) {
      logger.error(
        { workloadId: workload.id, err: (error as Error).message },
        'registry settings could not be read; the image is pulled without credentials',
      );
    }
    return { ...spec, registryAuth: registryAuthFor(spec.image, registries) };
  };
}

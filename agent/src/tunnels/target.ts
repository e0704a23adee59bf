import type Dockerode from 'dockerode';
import { LABELS } from '../docker/labels.ts';

export interface TunnelContainer {
  id: string;
  /** Its address on its Docker network; null when it has none (network mode none or host). */
  ipAddress: string | null;
}

/**
 * The running container of `workloadId` on this host, found by our labels only: a tunnel never reaches
 * a container that is not Anvil's, nor one of another host's workload sharing the engine.
 */
export async function findTunnelContainer(
  docker: Dockerode,
  hostId: string,
  workloadId: string,
): Promise<TunnelContainer> {
  const list = await docker.listContainers({
    filters: {
      label: [`${LABELS.managed}=true`, `${LABELS.workload}=${workloadId}`, `${LABELS.host}=${hostId}`],
      status: ['running'],
    },
  });
  const summary = list[0];
  if (!summary) throw new Error(`workload ${workloadId} has no running container on this host`);
  const details = await docker.getContainer(summary.Id).inspect();
  const labels = details.Config.Labels ?? {};
  // Listed by label, checked again on the inspected container: the filter is the engine's word.
  if (
    labels[LABELS.managed] !== 'true' ||
    labels[LABELS.workload] !== workloadId ||
    labels[LABELS.host] !== hostId
  ) {
    throw new Error(`container ${summary.Id.slice(0, 12)} is not workload ${workloadId}'s`);
  }
  if (!details.State.Running) throw new Error(`workload ${workloadId}'s container is not running`);
  let ipAddress: string | null = details.NetworkSettings.IPAddress || null;
  for (const network of Object.values(details.NetworkSettings.Networks ?? {})) {
    if (ipAddress) break;
    ipAddress = network.IPAddress || null;
  }
  return { id: details.Id, ipAddress };
}

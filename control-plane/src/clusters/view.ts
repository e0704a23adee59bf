import type { WorkloadStatus } from '@anvil/shared/protocol';
import { sessionCost } from '../billing/ledger.ts';
import type { Cluster } from '../db/generated/client.ts';
import { type Operation, progressOf } from './operation.ts';
import type { PortRequest } from './requests.ts';
import type { SnapshotCleanup } from './snapshots.ts';
import type { StopNotifications } from './stop-notifications.ts';
import type { ClusterViewParts } from './view-parts.ts';

export interface ClusterView {
  id: string;
  name: string;
  description: string | null;
  status: string;
  status_reason: string | null;
  gpu_type: string;
  gpu_count: number;
  cpu_cores: number;
  memory_gb: number;
  storage_gb: number;
  region: string | null;
  project_id: string | null;
  template_id: string | null;
  docker_image: string;
  /** While the host pulls the image before creating the container; null otherwise. */
  image_pull: ImagePull | null;
  /** Whether the host it is placed on bounds storage_gb, as its agent reports; null when not placed or unknown. */
  storage_quota: StorageQuota | null;
  ssh_enabled: boolean;
  port_mappings: { internal_port: number; external_port: number | null; protocol: string }[];
  proxy_url: string | null;
  ssh_connection: { host: string; port: number; username: string } | null;
  metrics: {
    gpu_utilization: number | null;
    memory_utilization: number | null;
    cpu_utilization: number | null;
  } | null;
  cost: { hourly_rate: number; current_session_cost: number; total_cost: number; currency: 'USD' };
  operation: {
    kind: string;
    phase: string;
    percentage: number;
    current_step: string;
    steps_completed: number;
    total_steps: number;
    started_at: string;
    completed_at: string | null;
    notes: string[];
    notifications: StopNotifications | null;
    snapshot_cleanup: SnapshotCleanup | null;
  } | null;
  created_at: string;
  updated_at: string;
  expires_at: string | null;
}

/** The short /v2 form (spec): containerDiskSize and volumeSize are both storage_gb (one volume per cluster). */
export interface ClusterShortView {
  id: string;
  name: string;
  status: string;
  gpuType: string;
  containerDiskSize: number;
  volumeSize: number;
  createdAt: string;
}

export function shortView(cluster: Cluster): ClusterShortView {
  return {
    id: cluster.id,
    name: cluster.name,
    status: cluster.status,
    gpuType: cluster.gpuType,
    containerDiskSize: cluster.storageGb,
    volumeSize: cluster.storageGb,
    createdAt: cluster.createdAt.toISOString(),
  };
}

/** Cost now: closed sessions (usage records) plus the open one at the rate fixed at placement. */
export function costOf(cluster: Cluster, closedTotal: number, now: Date) {
  const open = cluster.sessionStartedAt
    ? sessionCost(cluster.hourlyRate, now.getTime() - cluster.sessionStartedAt.getTime())
    : 0;
  return {
    hourly_rate: cluster.hourlyRate,
    current_session_cost: open,
    total_cost: Math.round((closedTotal + open) * 10_000) / 10_000,
    currency: 'USD' as const,
  };
}

export interface ImagePull {
  status: 'pulling';
  image: string;
  bytes_done: number;
  bytes_total: number | null;
}

/** The image pull under way for a cluster, from its workload's last reported status. */
export function imagePullOf(image: string, status: WorkloadStatus | null): ImagePull | null {
  if (status?.phase !== 'pulling') return null;
  return {
    status: 'pulling',
    image,
    bytes_done: status.pullProgress?.bytesDone ?? 0,
    bytes_total: status.pullProgress?.bytesTotal ?? null,
  };
}

export interface StorageQuota {
  enforced: boolean;
  reason: string | null;
}

/** Published host ports the agent reported, by container port and protocol. */
export type ActualPorts = Map<string, number>;

export async function clusterView(
  cluster: Cluster,
  input: {
    closedTotal: number;
    now: Date;
    parts: ClusterViewParts;
    actualPorts: ActualPorts;
    actualStatus: WorkloadStatus | null;
    withMetrics: boolean;
    /** What the agent says is wrong with the running container (over its disk quota), or null. */
    runningProblem?: string | null;
    /** The placed host's disk-quota capability (its inventory), or null when not placed or unknown. */
    storageQuota?: StorageQuota | null;
  },
): Promise<ClusterView> {
  const ports = (cluster.ports as unknown as PortRequest[]) ?? [];
  const proxy = input.parts.proxy ? await input.parts.proxy(cluster) : null;
  const op = cluster.operation as unknown as Operation | null;
  return {
    id: cluster.id,
    name: cluster.name,
    description: cluster.description,
    status: cluster.status,
    status_reason:
      cluster.statusReason ?? (cluster.status === 'running' ? (input.runningProblem ?? null) : null),
    gpu_type: cluster.gpuType,
    gpu_count: cluster.gpuCount,
    cpu_cores: cluster.cpuCores,
    memory_gb: cluster.memoryGb,
    storage_gb: cluster.storageGb,
    region: cluster.region,
    project_id: cluster.projectId,
    template_id: cluster.templateId,
    docker_image: cluster.dockerImage,
    image_pull: cluster.status === 'starting' ? imagePullOf(cluster.dockerImage, input.actualStatus) : null,
    storage_quota: input.storageQuota ?? null,
    ssh_enabled: cluster.sshEnabled,
    // A port Docker published on the host (direct ports, an operator's opt-in) is reported as it is; without
    // one, the proxy mapping's port (the <cluster>-<port> alias), or null.
    port_mappings:
      proxy?.port_mappings.map((m) => ({
        ...m,
        external_port: input.actualPorts.get(`${m.internal_port}/${m.protocol}`) ?? m.external_port,
      })) ??
      ports.map((p) => ({
        internal_port: p.internal_port,
        external_port: input.actualPorts.get(`${p.internal_port}/${p.protocol}`) ?? null,
        protocol: p.protocol,
      })),
    proxy_url: proxy?.proxy_url ?? null,
    ssh_connection: input.parts.ssh?.(cluster) ?? null,
    metrics: input.withMetrics && input.parts.metrics ? await input.parts.metrics(cluster) : null,
    cost: costOf(cluster, input.closedTotal, input.now),
    operation: op
      ? {
          kind: op.kind,
          ...progressOf(op),
          started_at: op.started_at,
          completed_at: op.completed_at,
          notes: op.notes,
          notifications: op.notifications ?? null,
          snapshot_cleanup: op.snapshot_cleanup ?? null,
        }
      : null,
    created_at: cluster.createdAt.toISOString(),
    updated_at: cluster.updatedAt.toISOString(),
    expires_at: cluster.expiresAt?.toISOString() ?? null,
  };
}

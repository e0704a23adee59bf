import type { Cluster } from '../db/generated/client.ts';

/**
 * Parts of the cluster object owned by other areas (contract 3). The ClusterService fills the cluster
 * view from these providers; a field is null when its provider is absent or returns null. Proxy: the
 * proxy helper's `proxyViewPart`; ssh: the SSH helper's `sshViewPart`; metrics: `metricsViewPart`.
 * Without a proxy provider, port_mappings come from the cluster's requested `ports`.
 */
export interface ClusterViewParts {
  proxy?(cluster: Cluster): Promise<{
    proxy_url: string | null;
    port_mappings: { internal_port: number; external_port: number; protocol: string }[];
  }>;
  ssh?(cluster: Cluster): { host: string; port: number; username: string } | null;
  metrics?(cluster: Cluster): Promise<{
    gpu_utilization: number | null;
    memory_utilization: number | null;
    cpu_utilization: number | null;
  } | null>;
}

import type { ApiClient } from '../api.ts';
import { CliError, EXIT } from '../exit-codes.ts';

export interface ClusterView {
  id: string;
  name: string;
  status: string;
  status_reason: string | null;
  gpu_type: string;
  gpu_count: number;
  cpu_cores: number;
  memory_gb: number;
  storage_gb: number;
  docker_image: string;
  ssh_enabled: boolean;
  ssh_connection: { host: string; port: number; username: string } | null;
  proxy_url: string | null;
  port_mappings: Array<{ internal_port: number; external_port: number | null; protocol: string }>;
  cost: { hourly_rate: number; total_cost: number; currency: string };
  created_at: string;
  [field: string]: unknown;
}

interface ClusterPage {
  clusters: ClusterView[];
  pagination: { has_next: boolean; current_page: number };
}

/** Every cluster the key may see, page by page (the API answers at most 100 at a time). */
export async function listClusters(
  api: ApiClient,
  query: Record<string, string> = {},
): Promise<ClusterView[]> {
  const all: ClusterView[] = [];
  for (let page = 1; ; page++) {
    const data = await api.call<ClusterPage>('GET', '/v1/clusters', {
      query: { ...query, limit: 100, page },
    });
    all.push(...data.clusters);
    if (!data.pagination.has_next) return all;
  }
}

/** A cluster by id (cluster_…) or by its exact name; a name two clusters share is refused as ambiguous. */
export async function findCluster(api: ApiClient, nameOrId: string): Promise<ClusterView> {
  if (nameOrId.startsWith('cluster_'))
    return api.call<ClusterView>('GET', `/v1/clusters/${encodeURIComponent(nameOrId)}`);
  const matches = (await listClusters(api, { search: nameOrId })).filter((c) => c.name === nameOrId);
  if (matches.length === 0) throw new CliError(`no cluster named "${nameOrId}"`, EXIT.notFound);
  if (matches.length > 1) {
    throw new CliError(
      `${matches.length} clusters are named "${nameOrId}" (${matches.map((c) => c.id).join(', ')}): use the id`,
      EXIT.refused,
    );
  }
  return matches[0]!;
}

export function age(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86_400)}d`;
}

import type { ClusterTemplate } from '../db/generated/client.ts';

/** Counts of the account's clusters created from one template. */
export interface TemplateStats {
  total: number;
  /** Running now (and not deleted). */
  active: number;
  /** No longer pending or starting: the start either reached running or did not. */
  decided: number;
  /** Ever reached running: running/stopping/stopped now, an open billing session, or a closed one. */
  reached: number;
}

export interface UsageStatistics {
  total_deployments: number;
  active_clusters: number;
  success_rate: number | null;
}

export interface ViewContext {
  users: Map<string, string | null>;
  accounts: Map<string, string>;
  /** USD per GPU-hour by GPU type. */
  prices: Map<string, number>;
}

const round = (value: number, digits: number) => Math.round(value * 10 ** digits) / 10 ** digits;

export function usageStatistics(stats: TemplateStats): UsageStatistics {
  return {
    total_deployments: stats.total,
    active_clusters: stats.active,
    success_rate: stats.decided === 0 ? null : round((100 * stats.reached) / stats.decided, 2),
  };
}

/** The spec's full template object. */
export function templateView(row: ClusterTemplate, stats: TemplateStats, context: ViewContext) {
  const config = (row.defaultConfiguration ?? {}) as Record<string, unknown>;
  const gpuType = typeof config['gpu_type'] === 'string' ? config['gpu_type'] : null;
  const gpuCount = typeof config['gpu_count'] === 'number' ? config['gpu_count'] : null;
  const price = gpuType ? context.prices.get(gpuType) : undefined;
  const limits = (row.resourceLimits ?? null) as Record<string, unknown> | null;
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    category: row.category,
    framework: row.framework,
    version: row.version,
    version_notes: row.versionNotes,
    docker_image: row.dockerImage,
    gpu_compatible: row.gpuCompatible,
    official: row.official,
    project_id: row.projectId === '' ? null : row.projectId,
    default_configuration: {
      gpu_type: gpuType,
      gpu_count: gpuCount,
      cpu_cores: typeof config['cpu_cores'] === 'number' ? config['cpu_cores'] : null,
      memory_gb: typeof config['memory_gb'] === 'number' ? config['memory_gb'] : null,
      storage_gb: typeof config['storage_gb'] === 'number' ? config['storage_gb'] : null,
      estimated_hourly_cost: price !== undefined && gpuCount !== null ? round(price * gpuCount, 4) : null,
    },
    environment_variables: (row.environmentVariables ?? {}) as Record<string, string>,
    startup_script: row.startupScript,
    port_mappings: (row.portMappings ?? []) as {
      internal_port: number;
      protocol: string;
      description: string;
      required: boolean;
    }[],
    required_packages: row.requiredPackages,
    software_versions: (row.softwareVersions ?? {}) as Record<string, string>,
    resource_limits: limits
      ? {
          min_resources: (limits['min_resources'] ?? null) as Record<string, number> | null,
          max_resources: (limits['max_resources'] ?? null) as Record<string, number> | null,
        }
      : null,
    compatibility: (row.compatibility ?? null) as Record<string, unknown> | null,
    usage_statistics: usageStatistics(stats),
    tags: row.tags,
    created_by:
      row.accountId === null
        ? null
        : {
            user_id: row.createdById,
            username: row.createdById ? (context.users.get(row.createdById) ?? null) : null,
            organization: context.accounts.get(row.accountId) ?? null,
          },
    created_at: row.createdAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
    is_public: row.isPublic,
    is_deprecated: row.isDeprecated,
  };
}

/** The /v2 short list form. */
export function shortTemplateView(row: ReturnType<typeof templateView>) {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    imageName: row.docker_image,
    category: row.category,
    official: row.official,
    gpuRequired: (row.default_configuration.gpu_count ?? 0) > 0,
  };
}

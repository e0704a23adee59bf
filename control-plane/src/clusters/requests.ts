import { ApiError } from '@anvil/shared';
import { GPU_TYPES, type GpuType, REGIONS } from '../scheduler/gpu-types.ts';
import type { TemplateDefaults, TemplateResolver } from '../templates/resolve.ts';

/** What a template contributes to a cluster: contract 2, defined once by the templates area. */
export type TemplateDefaultsLike = TemplateDefaults;
export type TemplateResolverLike = TemplateResolver;

export interface PortRequest {
  internal_port: number;
  protocol: 'tcp' | 'udp';
  description: string;
}

/** The create body as the route validated it (types and bounds); merging and cross-field rules are here. */
export interface CreateClusterBody {
  name: string;
  description?: string | undefined;
  template_id?: string | undefined;
  docker_image?: string | undefined;
  from_snapshot?: string | undefined;
  gpu_type?: string | undefined;
  gpu_count?: number | undefined;
  cpu_cores?: number | undefined;
  memory_gb?: number | undefined;
  storage_gb?: number | undefined;
  region?: string | undefined;
  command?: string | string[] | undefined;
  env?: Record<string, string> | undefined;
  ports?:
    | { internal_port: number; protocol?: 'tcp' | 'udp' | undefined; description?: string | undefined }[]
    | undefined;
  ssh_enabled?: boolean | undefined;
  expires_at?: string | undefined;
  project_id?: string | undefined;
}

/** A create request with the template applied and defaults filled: what the cluster row stores. */
export interface ResolvedCreate {
  name: string;
  description: string | null;
  templateId: string | null;
  dockerImage: string;
  gpuType: GpuType;
  gpuCount: number;
  cpuCores: number;
  memoryGb: number;
  storageGb: number;
  region: string | null;
  command: string[];
  env: Record<string, string>;
  ports: PortRequest[];
  sshEnabled: boolean;
  expiresAt: Date | null;
  projectId: string | null;
}

/** Defaults when neither the request nor the template names a size (documented in the OpenAPI description). */
export const CREATE_DEFAULTS = { gpu_count: 1, cpu_cores: 1, memory_gb: 1, storage_gb: 10 } as const;
export const LIMITS = {
  gpu_count: [1, 16],
  cpu_cores: [1, 256],
  memory_gb: [1, 4096],
  storage_gb: [1, 100_000],
} as const;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function invalid(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `body field "${field}" ${reason}`, {
    field,
    reason,
    location: 'body',
  });
}

function integerIn(field: keyof typeof LIMITS, value: unknown): number {
  const [min, max] = LIMITS[field];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(field, `must be an integer from ${min} to ${max}`);
  }
  return value;
}

/**
 * Applies the template (when named) under the request, and the account's preferences.default_gpu_type and
 * default_region under both: every field the request gives wins, env maps
 * are merged (request keys win), ports are the union by internal port (the request's description wins),
 * and the template's startup script is the command when the request has none.
 */
export function resolveCreate(
  body: CreateClusterBody,
  template: TemplateDefaultsLike | null,
  now: Date,
  account: { gpuType: string | null; region: string | null } = { gpuType: null, region: null },
): ResolvedCreate {
  const defaults = template?.defaults ?? {};
  const dockerImage = body.docker_image ?? template?.dockerImage;
  if (!dockerImage) throw invalid('docker_image', 'is required when no template_id is given');
  const gpuType = body.gpu_type ?? defaults.gpu_type ?? account.gpuType;
  if (!gpuType) {
    throw invalid(
      'gpu_type',
      'is required when neither the template nor the account (preferences.default_gpu_type) names one',
    );
  }
  if (!(GPU_TYPES as readonly string[]).includes(gpuType)) {
    throw invalid('gpu_type', `must be one of ${GPU_TYPES.join(', ')}`);
  }
  const region = body.region ?? account.region ?? undefined;
  if (region !== undefined && !(REGIONS as readonly string[]).includes(region)) {
    throw invalid('region', `must be one of ${REGIONS.join(', ')}`);
  }
  const env = { ...(template?.env ?? {}), ...(body.env ?? {}) };
  for (const key of Object.keys(env)) {
    if (!ENV_NAME.test(key)) throw invalid(`env.${key}`, 'is not a valid environment variable name');
  }
  const ports = new Map<string, PortRequest>();
  for (const port of template?.ports ?? []) ports.set(`${port.internal_port}/${port.protocol}`, { ...port });
  for (const port of body.ports ?? []) {
    const protocol = port.protocol ?? 'tcp';
    ports.set(`${port.internal_port}/${protocol}`, {
      internal_port: port.internal_port,
      protocol,
      description: port.description ?? ports.get(`${port.internal_port}/${protocol}`)?.description ?? '',
    });
  }
  let expiresAt: Date | null = null;
  if (body.expires_at !== undefined) {
    expiresAt = new Date(body.expires_at);
    if (Number.isNaN(expiresAt.getTime())) throw invalid('expires_at', 'is not an ISO 8601 date-time');
    if (expiresAt.getTime() <= now.getTime()) throw invalid('expires_at', 'must be in the future');
  }
  let command: string[] = [];
  if (typeof body.command === 'string') command = body.command.trim() ? ['sh', '-c', body.command] : [];
  else if (Array.isArray(body.command)) command = body.command;
  else if (template?.startupScript) command = ['sh', '-c', template.startupScript];
  const resolved = {
    name: body.name,
    description: body.description ?? null,
    templateId: template?.templateId ?? null,
    dockerImage,
    gpuType: gpuType as GpuType,
    gpuCount: integerIn('gpu_count', body.gpu_count ?? defaults.gpu_count ?? CREATE_DEFAULTS.gpu_count),
    cpuCores: integerIn('cpu_cores', body.cpu_cores ?? defaults.cpu_cores ?? CREATE_DEFAULTS.cpu_cores),
    memoryGb: integerIn('memory_gb', body.memory_gb ?? defaults.memory_gb ?? CREATE_DEFAULTS.memory_gb),
    storageGb: integerIn('storage_gb', body.storage_gb ?? defaults.storage_gb ?? CREATE_DEFAULTS.storage_gb),
    region: region ?? null,
    command,
    env,
    ports: [...ports.values()].sort((a, b) => a.internal_port - b.internal_port),
    sshEnabled: body.ssh_enabled ?? false,
    expiresAt,
    projectId: body.project_id ?? null,
  };
  if (template) checkTemplateBounds(template, resolved);
  return resolved;
}

/**
 * A cluster made from a template stays within what the template declares it runs with: its
 * compatibility.gpu_types and its resource_limits (min and max per resource).
 */
function checkTemplateBounds(
  template: TemplateDefaultsLike,
  cluster: { gpuType: string; gpuCount: number; cpuCores: number; memoryGb: number; storageGb: number },
): void {
  if (template.gpuTypes.length > 0 && !template.gpuTypes.includes(cluster.gpuType)) {
    throw invalid(
      'gpu_type',
      `must be one the template ${template.templateId} is compatible with: ${template.gpuTypes.join(', ')}`,
    );
  }
  const values = {
    gpu_count: cluster.gpuCount,
    cpu_cores: cluster.cpuCores,
    memory_gb: cluster.memoryGb,
    storage_gb: cluster.storageGb,
  };
  for (const [field, value] of Object.entries(values) as [keyof typeof values, number][]) {
    const min = template.limits.min[field];
    const max = template.limits.max[field];
    if (min !== undefined && value < min) {
      throw invalid(
        field,
        `must be at least ${min} for template ${template.templateId} (its resource_limits)`,
      );
    }
    if (max !== undefined && value > max) {
      throw invalid(
        field,
        `must be at most ${max} for template ${template.templateId} (its resource_limits)`,
      );
    }
  }
}

// ---- list

export const CLUSTER_STATUSES = [
  'pending',
  'starting',
  'running',
  'stopping',
  'stopped',
  'deleting',
  'error',
] as const;
export const SORT_FIELDS = ['created_at', 'name', 'status', 'gpu_count', 'cost'] as const;

export interface ListQuery {
  page: number;
  limit: number;
  status: string | null;
  gpuType: string | null;
  region: string | null;
  projectId: string | null;
  templateId: string | null;
  sortBy: (typeof SORT_FIELDS)[number];
  sortOrder: 'asc' | 'desc';
  search: string | null;
  minGpuCount: number | null;
  maxGpuCount: number | null;
  createdAfter: Date | null;
  createdBefore: Date | null;
  includeMetrics: boolean;
}

export const LIST_PARAMETERS = [
  'page',
  'limit',
  'status',
  'gpu_type',
  'region',
  'project_id',
  'template_id',
  'sort_by',
  'sort_order',
  'search',
  'min_gpu_count',
  'max_gpu_count',
  'created_after',
  'created_before',
  'include_metrics',
] as const;

/**
 * Parses the list query, collecting every bad parameter: 400 INVALID_PARAMETERS with details
 * `{<parameter>: reason}` (spec: Errors), unknown parameters included.
 */
export function parseListQuery(raw: Record<string, unknown>): ListQuery {
  const errors: Record<string, string> = {};
  const text = (name: string): string | null => {
    const value = raw[name];
    if (value === undefined) return null;
    if (typeof value !== 'string') {
      errors[name] = 'must be given once';
      return null;
    }
    return value;
  };
  const int = (name: string, fallback: number | null, min: number, max: number): number | null => {
    const value = text(name);
    if (value === null) return fallback;
    if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
      errors[name] = `must be an integer from ${min} to ${max}`;
      return fallback;
    }
    return Number(value);
  };
  const oneOf = <T extends string>(name: string, values: readonly T[]): T | null => {
    const value = text(name);
    if (value === null) return null;
    if (!(values as readonly string[]).includes(value)) {
      errors[name] = `must be one of ${values.join(', ')}`;
      return null;
    }
    return value as T;
  };
  const date = (name: string): Date | null => {
    const value = text(name);
    if (value === null) return null;
    const parsed = new Date(value);
    if (!/^\d{4}-\d{2}-\d{2}/.test(value) || Number.isNaN(parsed.getTime())) {
      errors[name] = 'must be an ISO 8601 date or date-time';
      return null;
    }
    return parsed;
  };
  for (const name of Object.keys(raw)) {
    if (!(LIST_PARAMETERS as readonly string[]).includes(name)) errors[name] = 'is not a known parameter';
  }
  const includeRaw = text('include_metrics');
  if (includeRaw !== null && includeRaw !== 'true' && includeRaw !== 'false') {
    errors['include_metrics'] = 'must be true or false';
  }
  const search = text('search');
  if (search !== null && search.length > 200) errors['search'] = 'must be at most 200 characters';
  const query: ListQuery = {
    page: int('page', 1, 1, 1_000_000) ?? 1,
    limit: int('limit', 20, 1, 100) ?? 20,
    status: oneOf('status', CLUSTER_STATUSES),
    gpuType: oneOf('gpu_type', GPU_TYPES),
    region: oneOf('region', REGIONS),
    projectId: text('project_id'),
    templateId: text('template_id'),
    sortBy: oneOf('sort_by', SORT_FIELDS) ?? 'created_at',
    sortOrder: oneOf('sort_order', ['asc', 'desc'] as const) ?? 'desc',
    search: search?.trim() || null,
    minGpuCount: int('min_gpu_count', null, 0, 1000),
    maxGpuCount: int('max_gpu_count', null, 0, 1000),
    createdAfter: date('created_after'),
    createdBefore: date('created_before'),
    includeMetrics: includeRaw === 'true',
  };
  if (query.minGpuCount !== null && query.maxGpuCount !== null && query.minGpuCount > query.maxGpuCount) {
    errors['min_gpu_count'] = 'must not be greater than max_gpu_count';
  }
  if (query.createdAfter && query.createdBefore && query.createdAfter > query.createdBefore) {
    errors['created_after'] = 'must not be after created_before';
  }
  if (Object.keys(errors).length > 0) {
    throw new ApiError(
      'INVALID_PARAMETERS',
      `invalid query parameter(s): ${Object.keys(errors).join(', ')}`,
      errors,
    );
  }
  return query;
}

/** The parameters that narrowed the list, as data.filters_applied shows them. */
export function filtersApplied(query: ListQuery): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  const add = (name: string, value: string | number | Date | null) => {
    if (value !== null) out[name] = value instanceof Date ? value.toISOString() : value;
  };
  add('status', query.status);
  add('gpu_type', query.gpuType);
  add('region', query.region);
  add('project_id', query.projectId);
  add('template_id', query.templateId);
  add('search', query.search);
  add('min_gpu_count', query.minGpuCount);
  add('max_gpu_count', query.maxGpuCount);
  add('created_after', query.createdAfter);
  add('created_before', query.createdBefore);
  out['sort_by'] = query.sortBy;
  out['sort_order'] = query.sortOrder;
  return out;
}

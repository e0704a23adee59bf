import { ApiError } from '@anvil/shared';
import type { ClusterTemplate } from '../db/generated/client.ts';
import type { ResourceBounds } from './rules.ts';

/**
 * Contract 2 (templates → clusters): what creating a cluster from a template applies. The clusters
 * area merges these under the request's own fields (request fields win).
 */
export interface TemplateDefaults {
  templateId: string;
  dockerImage: string;
  env: Record<string, string>;
  ports: { internal_port: number; protocol: 'tcp' | 'udp'; description: string }[];
  startupScript: string | null;
  defaults: {
    gpu_type?: string;
    gpu_count?: number;
    cpu_cores?: number;
    memory_gb?: number;
    storage_gb?: number;
  };
  /** The template's resource_limits: a cluster made from it must lie within them. */
  limits: { min: ResourceBounds; max: ResourceBounds };
  /** compatibility.gpu_types: the GPU types the template runs on (empty: any). */
  gpuTypes: string[];
}

/** Throws ApiError TEMPLATE_NOT_FOUND; sees official templates and the account's own (not deleted). */
export interface TemplateResolver {
  resolveForCluster(accountId: string, templateId: string): Promise<TemplateDefaults>;
}

export function templateNotFound(templateId: string): ApiError {
  return new ApiError('TEMPLATE_NOT_FOUND', `no template ${templateId} available to this account`, {
    template_id: templateId,
    suggestion: 'list available templates with GET /v1/clusters/templates',
  });
}

/** The cluster-creation view of a stored template row. */
export function defaultsOf(template: ClusterTemplate): TemplateDefaults {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(asRecord(template.environmentVariables))) {
    if (typeof value === 'string') env[key] = value;
    else if (value !== null && value !== undefined) env[key] = String(value);
  }
  const ports: TemplateDefaults['ports'] = [];
  for (const raw of Array.isArray(template.portMappings) ? template.portMappings : []) {
    const port = asRecord(raw);
    const internal = port['internal_port'];
    if (typeof internal !== 'number') continue;
    const description = port['description'];
    ports.push({
      internal_port: internal,
      protocol: port['protocol'] === 'udp' ? 'udp' : 'tcp',
      description: typeof description === 'string' ? description : '',
    });
  }
  const config = asRecord(template.defaultConfiguration);
  const defaults: TemplateDefaults['defaults'] = {};
  const gpuType = config['gpu_type'];
  if (typeof gpuType === 'string') defaults.gpu_type = gpuType;
  for (const key of ['gpu_count', 'cpu_cores', 'memory_gb', 'storage_gb'] as const) {
    const value = config[key];
    if (typeof value === 'number') defaults[key] = value;
  }
  const limits = asRecord(template.resourceLimits);
  const bounds = (value: unknown): ResourceBounds => {
    const record = asRecord(value);
    const out: ResourceBounds = {};
    for (const key of ['gpu_count', 'cpu_cores', 'memory_gb', 'storage_gb'] as const) {
      if (typeof record[key] === 'number') out[key] = record[key];
    }
    return out;
  };
  const gpuTypes = asRecord(template.compatibility)['gpu_types'];
  return {
    limits: { min: bounds(limits['min_resources']), max: bounds(limits['max_resources']) },
    gpuTypes: Array.isArray(gpuTypes) ? gpuTypes.filter((g): g is string => typeof g === 'string') : [],
    templateId: template.id,
    dockerImage: template.dockerImage,
    env,
    ports,
    startupScript: template.startupScript,
    defaults,
  };
}

function asRecord(value: unknown): Record<string, unknown> {
  return value && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

import type { Endpoint, EndpointJob } from '../db/generated/client.ts';
import type { AutoScaling, EndpointConfiguration, WorkerProtocol } from './configuration.ts';

/** The execution URL (spec): `{base_url}/v2/<endpoint_id>/runsync`, base_url being ANVIL_PUBLIC_URL. */
export function executionUrl(publicUrl: string, endpointId: string): string {
  return `${publicUrl}/v2/${endpointId}/runsync`;
}

export function configurationOf(endpoint: Endpoint): EndpointConfiguration {
  return {
    workerCount: endpoint.workerCount,
    maxConcurrency: endpoint.maxConcurrency,
    timeoutSeconds: endpoint.timeoutSeconds,
    environmentVariables: endpoint.env as Record<string, string>,
    autoScaling: endpoint.autoScaling as unknown as AutoScaling,
    workerProtocol: endpoint.workerProtocol as WorkerProtocol,
  };
}

export interface EndpointMetrics {
  totalExecutions: number;
  averageLatency: number | null;
  lastExecution: string | null;
}

export interface WorkerCounts {
  target: number;
  ready: number;
  starting: number;
  draining: number;
}

/** The endpoint as the API shows it: every field from its row, its workers and its jobs. */
export function viewEndpoint(
  endpoint: Endpoint,
  publicUrl: string,
  metrics: EndpointMetrics,
  workers: WorkerCounts,
) {
  return {
    id: endpoint.id,
    name: endpoint.name,
    status: endpoint.status,
    statusReason: endpoint.statusReason,
    url: executionUrl(publicUrl, endpoint.id),
    templateId: endpoint.templateId,
    image: endpoint.dockerImage,
    gpuType: endpoint.gpuType,
    gpuCount: endpoint.gpuCount,
    workerPort: endpoint.workerPort,
    createdAt: endpoint.createdAt.toISOString(),
    updatedAt: endpoint.updatedAt.toISOString(),
    metrics,
    configuration: configurationOf(endpoint),
    workers,
  };
}

const ms = (from: Date | null, to: Date | null) =>
  from && to ? Math.max(0, to.getTime() - from.getTime()) : null;

/**
 * A job as RunPod's status answers it: delayTime = ms from queued to started (to now while queued),
 * executionTime = ms from started to completed (to now while running).
 */
export function viewJob(job: EndpointJob, now: Date) {
  const running = job.status === 'IN_PROGRESS';
  return {
    id: job.id,
    status: job.status,
    delayTime: job.startedAt
      ? ms(job.queuedAt, job.startedAt)
      : job.status === 'IN_QUEUE'
        ? ms(job.queuedAt, now)
        : null,
    executionTime: job.startedAt ? ms(job.startedAt, job.completedAt ?? (running ? now : null)) : null,
    output: job.output ?? null,
    error: job.error,
    workerId: job.workerId,
    retries: job.retries,
    attempts: job.attempts,
    createdAt: job.createdAt.toISOString(),
    startedAt: job.startedAt?.toISOString() ?? null,
    completedAt: job.completedAt?.toISOString() ?? null,
    expiresAt: job.expiresAt.toISOString(),
  };
}

export type JobView = ReturnType<typeof viewJob>;

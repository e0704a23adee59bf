import type { Endpoint, EndpointWorker } from '../db/generated/client.ts';

// What an endpoint's health readings mean: its issues, the statuses of the report and its checks, the
// startup progress and the recovery actions. Pure: health.ts gathers the readings (rows, samples, probes).

/** Above this percentage of failed jobs in the last hour, the endpoint is degraded. */
export const HIGH_ERROR_RATE = 10;

export type Status = 'healthy' | 'degraded' | 'unhealthy' | 'failed' | 'unknown';

export interface Issue {
  type: string;
  severity: 'low' | 'medium' | 'high' | 'critical';
  component: string;
  message: string;
  timestamp: string;
  recommendation: string;
}

export const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;
export const avg = (values: number[]) =>
  values.length === 0 ? null : values.reduce((a, b) => a + b, 0) / values.length;

/** A duration as the spec writes uptime: `1d 2h 3m 4s`. */
export function duration(ms: number): string {
  const s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  return [d ? `${d}d` : '', h ? `${h}h` : '', m ? `${m}m` : '', `${s % 60}s`].filter(Boolean).join(' ');
}

/** The readings the issues are found in. */
export interface IssueReadings {
  endpoint: Endpoint;
  readyCount: number;
  /** Workers that failed or were lost in the last hour. */
  failedRecently: EndpointWorker[];
  /** The error of each failing health check of a ready worker (null when none was recorded). */
  failingProbes: (string | null)[];
  probeCount: number;
  /** Jobs waiting in the queue. */
  queued: number;
  /** Percentage of the jobs finished in the last hour that failed or timed out (null: none finished). */
  errorRate: number | null;
  gpuWarnings: string[];
  /** When the readings were taken (ISO 8601). */
  stamp: string;
}

/** Each problem the readings show, with its severity and what to do. */
export function issuesOf(r: IssueReadings): Issue[] {
  const issues: Issue[] = [];
  if (r.endpoint.statusReason?.startsWith('waiting for') || r.endpoint.statusReason?.startsWith('no host')) {
    issues.push({
      type: 'capacity',
      severity: r.readyCount === 0 ? 'high' : 'medium',
      component: 'scheduler',
      message: r.endpoint.statusReason,
      timestamp: r.endpoint.updatedAt.toISOString(),
      recommendation: 'workers start when GPUs of this type free up; or choose another gpuType',
    });
  }
  for (const w of r.failedRecently) {
    issues.push({
      type: w.status === 'lost' ? 'host_unreachable' : 'worker_failure',
      severity: r.readyCount === 0 ? 'critical' : 'medium',
      component: 'workers',
      message: `worker ${w.id} ${w.status}: ${w.statusReason ?? 'unknown reason'}`,
      timestamp: (w.stoppedAt ?? w.updatedAt).toISOString(),
      recommendation:
        w.status === 'lost'
          ? 'a replacement is started on another host'
          : 'check the worker logs: GET /v2/admin/workloads/<worker id>/logs',
    });
  }
  if (r.failingProbes.length > 0) {
    issues.push({
      type: 'health_check',
      severity: r.failingProbes.length === r.probeCount ? 'high' : 'medium',
      component: 'api',
      message: `${r.failingProbes.length} of ${r.probeCount} ready workers fail GET /health: ${r.failingProbes[0] ?? ''}`,
      timestamp: r.stamp,
      recommendation: 'a worker failing 3 checks in a row is replaced',
    });
  }
  if (r.queued > 0 && r.readyCount === 0) {
    issues.push({
      type: 'queue_backlog',
      severity: 'high',
      component: 'queue',
      message: `${r.queued} job(s) waiting and no worker ready`,
      timestamp: r.stamp,
      recommendation:
        'jobs run once a worker is ready; purge the queue with POST /v2/<endpoint_id>/purge-queue',
    });
  }
  if (r.errorRate !== null && r.errorRate > HIGH_ERROR_RATE) {
    issues.push({
      type: 'error_rate',
      severity: r.errorRate > 50 ? 'high' : 'medium',
      component: 'model',
      message: `${r.errorRate}% of the jobs finished in the last hour failed or timed out`,
      timestamp: r.stamp,
      recommendation: 'read the failed jobs’ error with GET /v2/<endpoint_id>/status/<job_id>',
    });
  }
  for (const warning of r.gpuWarnings) {
    issues.push({
      type: 'gpu',
      severity: 'medium',
      component: 'resources',
      message: warning,
      timestamp: r.stamp,
      recommendation: 'check the host’s cooling',
    });
  }
  return issues;
}

/** The report's status: error, stopped, starting, unhealthy, degraded or healthy. */
export function overallStatus(
  endpoint: Endpoint,
  n: { live: number; ready: number; starting: number; failingProbes: number; errorRate: number | null },
) {
  const target = endpoint.targetWorkers;
  return endpoint.status === 'error'
    ? 'error'
    : target === 0 && n.live === 0
      ? 'stopped'
      : n.ready === 0
        ? n.starting > 0
          ? 'starting'
          : 'unhealthy'
        : n.ready < target || n.failingProbes > 0 || (n.errorRate !== null && n.errorRate > HIGH_ERROR_RATE)
          ? 'degraded'
          : 'healthy';
}

/** The api check's status from the ready workers' health checks. */
export function probeStatus(live: number, ready: number, failing: number, probes: number): Status {
  return live === 0
    ? 'unknown'
    : ready === 0
      ? 'unhealthy'
      : failing === 0
        ? 'healthy'
        : failing < probes
          ? 'degraded'
          : 'unhealthy';
}

/** The model check's status: failed with the endpoint in error, else by its workers. */
export function modelStatus(endpoint: Endpoint, live: number, ready: number): Status {
  return endpoint.status === 'error' ? 'failed' : ready > 0 ? 'healthy' : live > 0 ? 'degraded' : 'unknown';
}

type StartingWorkload = { id: string; phase: string; pullProgress: unknown };

/**
 * Startup of the workers still starting: phases placement → image_pull → container_start → health_check,
 * each completed, in_progress or pending from the worker row and its workload. progress = phases completed
 * / 4 × 100, averaged over the starting workers; estimates are null (nothing to base them on).
 */
export function startup(
  starting: EndpointWorker[],
  loads: Map<string, StartingWorkload>,
  endpoint: Endpoint,
  nowMs: number,
) {
  if (starting.length === 0) {
    return {
      phase: 'waiting_for_capacity',
      progress: 0,
      estimatedCompletion: null,
      phases: [
        {
          name: 'placement',
          status: 'in_progress',
          duration: null,
          progress: 0,
          estimatedRemaining: null,
          estimatedDuration: null,
        },
      ],
      reason: endpoint.statusReason,
    };
  }
  const perWorker = starting.map((w) => {
    const load = loads.get(w.id);
    const phase = load?.phase ?? 'pending';
    const pull = load?.pullProgress as {
      current?: number | null;
      total?: number | null;
      done?: boolean;
    } | null;
    const pulled = phase === 'running' || phase === 'exited' || pull?.done === true;
    const running = phase === 'running';
    const pullProgress = pulled ? 100 : pull?.total ? round(((pull.current ?? 0) / pull.total) * 100) : 0;
    return [
      { name: 'placement', status: 'completed', duration: null, progress: 100 },
      {
        name: 'image_pull',
        status: pulled ? 'completed' : 'in_progress',
        duration: null,
        progress: pullProgress,
      },
      {
        name: 'container_start',
        status: running ? 'completed' : pulled ? 'in_progress' : 'pending',
        duration: null,
        progress: running ? 100 : 0,
      },
      {
        name: 'health_check',
        status: running ? 'in_progress' : 'pending',
        duration: running ? nowMs - w.createdAt.getTime() : null,
        progress: 0,
      },
    ];
  });
  const least = perWorker.reduce((a, b) =>
    b.filter((p) => p.status === 'completed').length < a.filter((p) => p.status === 'completed').length
      ? b
      : a,
  );
  const progress =
    avg(
      perWorker.map(
        (phases) => (phases.filter((p) => p.status === 'completed').length / phases.length) * 100,
      ),
    ) ?? 0;
  return {
    phase: least.find((p) => p.status !== 'completed')?.name ?? 'health_check',
    progress: round(progress),
    estimatedCompletion: null,
    phases: least.map((p) => ({ ...p, estimatedRemaining: null, estimatedDuration: null })),
    reason: endpoint.statusReason,
  };
}

export function recoveryActions(issues: Issue[], endpoint: Endpoint, gpuHourly: number | null) {
  const actions: Record<string, unknown>[] = [];
  const types = new Set(issues.map((i) => i.type));
  if (types.has('worker_failure')) {
    actions.push({
      action: 'replace_failed_workers',
      description:
        'failed workers are replaced automatically; after 3 failures in a row the endpoint is in error and retries every 30 s',
      estimated_downtime: null,
    });
  }
  if (types.has('queue_backlog') || types.has('capacity')) {
    actions.push({
      action: 'add_worker',
      description: `one more worker (${endpoint.gpuCount} x ${endpoint.gpuType}) with PUT /v2/endpoints/${endpoint.id} (workerCount or autoScaling.maxWorkers)`,
      estimated_cost_increase: gpuHourly === null ? null : round(gpuHourly * endpoint.gpuCount, 4),
    });
  }
  if (types.has('error_rate')) {
    actions.push({
      action: 'retry_failed_jobs',
      description: 'POST /v2/<endpoint_id>/retry/<job_id> queues a FAILED or TIMED_OUT job again',
      estimated_downtime: null,
    });
  }
  return actions;
}

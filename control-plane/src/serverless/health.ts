import { ApiError } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import type { Endpoint, EndpointWorker } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import {
  avg,
  duration,
  issuesOf,
  modelStatus,
  overallStatus,
  probeStatus,
  recoveryActions,
  round,
  type Status,
  startup,
} from './health-assessment.ts';
import type { EndpointService } from './service.ts';
import type { WorkerClient } from './worker-client.ts';

export type HealthCheckLevel = 'basic' | 'detailed' | 'deep';
export type HealthInclude = 'dependencies' | 'resources' | 'connectivity';

export interface HealthOptions {
  check: HealthCheckLevel;
  timeoutMs: number;
  include: HealthInclude[];
}

const HOUR_MS = 3_600_000;
/** GPU, container and host samples older than this are not "current" readings. */
const SAMPLE_MAX_AGE_MS = 120_000;
const HOT_GPU_C = 85;

/** Thrown inside a check when its deadline passed: what was computed so far goes into the 408. */
class Deadline extends Error {}

/**
 * The spec's health report, readiness and liveness of an endpoint, derived only from real state: worker
 * rows and their workloads (container phase, image pull, host reachability), the workers' GET /health
 * checks (stored by the supervisor; run again now for `deep` and `connectivity`), the job table (the last
 * hour), and the last GPU, container and host samples the agents reported for the workers (at most 2
 * minutes old). Whatever is not measured is null.
 */
export class EndpointHealth {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      endpoints: EndpointService;
      client: WorkerClient;
    },
  ) {}

  async report(actor: Actor, endpointId: string, options: HealthOptions) {
    const endpoint = await this.d.endpoints.require(actor, endpointId, 'read');
    return this.#guarded(endpoint, options);
  }

  /** Several endpoints at once; unknown or other accounts' ids are listed under errors. */
  async batch(actor: Actor, endpointIds: string[], options: HealthOptions) {
    const reports: unknown[] = [];
    const errors: { endpointId: string; error: string; message: string; code: number }[] = [];
    const deadline = Date.now() + options.timeoutMs;
    for (const id of [...new Set(endpointIds)]) {
      try {
        const endpoint = await this.d.endpoints.require(actor, id, 'read');
        reports.push(
          await this.#guarded(endpoint, { ...options, timeoutMs: Math.max(1, deadline - Date.now()) }),
        );
      } catch (error) {
        if (!(error instanceof ApiError) || error.status === 403 || error.status >= 500) throw error;
        errors.push({ endpointId: id, error: error.code, message: error.message, code: error.status });
      }
    }
    const statuses = reports.map((r) => (r as { status: string }).status);
    return {
      reports,
      errors,
      summary: {
        total: reports.length,
        healthy: statuses.filter((s) => s === 'healthy').length,
        degraded: statuses.filter((s) => s === 'degraded').length,
        unhealthy: statuses.filter((s) => !['healthy', 'degraded'].includes(s)).length,
      },
    };
  }

  async #guarded(endpoint: Endpoint, options: HealthOptions) {
    const started = performance.now();
    const deadline = Date.now() + options.timeoutMs;
    const partial: Record<string, unknown> = { endpointId: endpoint.id };
    try {
      return await this.#build(endpoint, options, deadline, partial, started);
    } catch (error) {
      if (error instanceof Deadline) {
        throw new ApiError(
          'HEALTH_CHECK_TIMEOUT',
          `the ${options.check} health check took longer than ${options.timeoutMs / 1000} s`,
          {
            timeout: options.timeoutMs / 1000,
            partialResults: partial,
            recommendation: 'raise timeout (up to 30 s), or ask for check=basic, which runs no worker checks',
          },
        );
      }
      if (error instanceof ApiError) throw error;
      throw new ApiError('HEALTH_CHECK_FAILED', 'the health of this endpoint could not be read', {
        reason: (error as Error).message,
        retryAfter: 5,
        fallbackStatus: endpoint.status === 'active' ? 'healthy' : 'unknown',
      });
    }
  }

  async #build(
    endpoint: Endpoint,
    options: HealthOptions,
    deadline: number,
    partial: Record<string, unknown>,
    started: number,
  ) {
    const checkDeadline = () => {
      if (Date.now() > deadline) throw new Deadline();
    };
    const now = this.d.clock.now();
    const nowMs = now.getTime();
    const db = this.d.db;
    const workers = await db.prisma.endpointWorker.findMany({
      where: {
        endpointId: endpoint.id,
        OR: [
          { status: { in: ['starting', 'ready', 'draining'] } },
          { stoppedAt: { gte: new Date(nowMs - HOUR_MS) } },
        ],
      },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    const live = workers.filter((w) => ['starting', 'ready', 'draining'].includes(w.status));
    const ready = live.filter((w) => w.status === 'ready');
    const starting = live.filter((w) => w.status === 'starting');
    const failedRecently = workers.filter((w) => w.status === 'failed' || w.status === 'lost');
    const [stats] = await db.sql.query<{
      requests: number;
      completed: number;
      failed: number;
      avg_ms: number | null;
      last: Date | null;
      queued: number;
    }>(
      `SELECT count(*) FILTER (WHERE created_at >= $2)::int AS requests,
              count(*) FILTER (WHERE status = 'COMPLETED' AND completed_at >= $2)::int AS completed,
              count(*) FILTER (WHERE status IN ('FAILED', 'TIMED_OUT') AND started_at IS NOT NULL AND completed_at >= $2)::int AS failed,
              avg(EXTRACT(EPOCH FROM (completed_at - created_at)) * 1000) FILTER (WHERE status = 'COMPLETED' AND completed_at >= $2)::float8 AS avg_ms,
              max(completed_at) FILTER (WHERE status = 'COMPLETED') AS last,
              count(*) FILTER (WHERE status = 'IN_QUEUE')::int AS queued
         FROM endpoint_jobs WHERE endpoint_id = $1 AND (created_at >= $2 OR completed_at >= $2 OR status = 'IN_QUEUE')`,
      [endpoint.id, new Date(nowMs - HOUR_MS)],
    );
    const finished = (stats?.completed ?? 0) + (stats?.failed ?? 0);
    const errorRate = finished === 0 ? null : round(((stats?.failed ?? 0) / finished) * 100);
    const metrics = {
      requestsLastHour: stats?.requests ?? 0,
      averageLatency:
        stats?.avg_ms === null || stats?.avg_ms === undefined ? null : Math.round(Number(stats.avg_ms)),
      errorRate,
      successRate: errorRate === null ? null : round(100 - errorRate),
    };
    partial['metrics'] = metrics;
    checkDeadline();

    // Worker checks: the supervisor's last GET /health of each ready worker, or a fresh one for deep/connectivity.
    // A RunPod-protocol worker serves nothing to probe: its last contact (ping, take) is its check.
    const probeNow =
      (options.check === 'deep' || options.include.includes('connectivity')) &&
      endpoint.workerProtocol !== 'runpod';
    const probes = new Map<string, { ok: boolean; ms: number | null; error: string | null }>();
    for (const w of ready) {
      probes.set(w.id, { ok: w.probeFailures === 0, ms: w.lastProbeMs, error: w.lastProbeError });
    }
    if (probeNow && ready.length > 0) {
      const timeout = Math.max(1, Math.min(5_000, deadline - Date.now()));
      const results = await Promise.race([
        Promise.all(
          ready.map(
            async (w) => [w.id, await this.d.client.probe(w.id, endpoint.workerPort, timeout)] as const,
          ),
        ),
        new Promise<null>((resolve) =>
          setTimeout(() => resolve(null), Math.max(0, deadline - Date.now())).unref(),
        ),
      ]);
      if (results === null) throw new Deadline();
      for (const [id, r] of results) probes.set(id, { ok: r.ok, ms: r.ms, error: r.ok ? null : r.error });
    }
    const probeList = [...probes.values()];
    const failing = probeList.filter((p) => !p.ok);
    const apiStatus = probeStatus(live.length, ready.length, failing.length, probeList.length);
    const probeMs = avg(probeList.flatMap((p) => (p.ms === null ? [] : [p.ms])));
    const checks: Record<string, unknown> = {
      api: {
        status: apiStatus,
        responseTime: probeMs === null ? null : Math.round(probeMs),
        lastError: failing[0]?.error ?? null,
        checkedNow: probeNow,
      },
      model: {
        status: modelStatus(endpoint, live.length, ready.length),
        loadTime: (() => {
          const v = avg(
            ready.flatMap((w) => (w.readyAt ? [w.readyAt.getTime() - w.createdAt.getTime()] : [])),
          );
          return v === null ? null : Math.round(v);
        })(),
        memoryUsage: null as number | null,
        lastInference: stats?.last ? new Date(stats.last).toISOString() : null,
        warnings: failedRecently.map(
          (w) => `worker ${w.id} ${w.status}: ${w.statusReason ?? 'unknown reason'}`,
        ),
      },
      dependencies: null as unknown,
    };
    partial['checks'] = checks;
    checkDeadline();

    const hostIds = [...new Set(live.map((w) => w.hostId))];
    const wantResources = options.include.includes('resources') || options.check !== 'basic';
    let resources: Record<string, unknown> | null = null;
    if (wantResources || live.length > 0) {
      resources = await this.#resources(live, hostIds, nowMs);
      const gpu = resources['gpu'] as { memory: { used: number | null } };
      (checks['model'] as { memoryUsage: number | null }).memoryUsage = gpu.memory.used;
      if (!wantResources) resources = null;
    }
    partial['resources'] = resources;
    checkDeadline();

    if (options.include.includes('dependencies') || options.check === 'deep') {
      checks['dependencies'] = await this.#dependencies(hostIds);
    }
    checkDeadline();

    const workloads = await db.prisma.workload.findMany({
      where: { id: { in: starting.map((w) => w.id) } },
      select: { id: true, phase: true, pullProgress: true },
    });
    const startupProgress =
      starting.length > 0 || (endpoint.status === 'pending' && ready.length === 0)
        ? startup(starting, new Map(workloads.map((w) => [w.id, w])), endpoint, nowMs)
        : null;

    const stamp = now.toISOString();
    const issues = issuesOf({
      endpoint,
      readyCount: ready.length,
      failedRecently,
      failingProbes: failing.map((p) => p.error),
      probeCount: probeList.length,
      queued: stats?.queued ?? 0,
      errorRate,
      gpuWarnings: (resources?.['gpu'] as { warnings?: string[] } | undefined)?.warnings ?? [],
      stamp,
    });
    const status = overallStatus(endpoint, {
      live: live.length,
      ready: ready.length,
      starting: starting.length,
      failingProbes: failing.length,
      errorRate,
    });
    const oldestReady = ready.reduce<number | null>(
      (m, w) => (w.readyAt && (m === null || w.readyAt.getTime() < m) ? w.readyAt.getTime() : m),
      null,
    );
    const price = await db.prisma.gpuPrice.findUnique({ where: { gpuType: endpoint.gpuType } });
    return {
      endpointId: endpoint.id,
      status,
      readiness: ready.length > 0 ? 'ready' : starting.length > 0 ? 'warming_up' : 'not_ready',
      lastChecked: stamp,
      responseTime: Math.round(performance.now() - started),
      uptime: oldestReady === null ? null : duration(nowMs - oldestReady),
      version: `config-${endpoint.configVersion}`,
      issues,
      checks,
      resources,
      metrics,
      startupProgress,
      recoveryActions: recoveryActions(issues, endpoint, price?.hourlyRate ?? null),
    };
  }

  async #resources(live: EndpointWorker[], hostIds: string[], nowMs: number) {
    const since = new Date(nowMs - SAMPLE_MAX_AGE_MS);
    const hosts = await this.d.db.prisma.host.findMany({
      where: { id: { in: hostIds } },
      select: { id: true, inventory: true },
    });
    const uuids: string[] = [];
    for (const w of live) {
      const devices =
        (
          hosts.find((h) => h.id === w.hostId)?.inventory as {
            gpus?: { devices?: { index: number; uuid: string }[] };
          } | null
        )?.gpus?.devices ?? [];
      for (const index of w.gpuIndices) {
        const uuid = devices.find((d) => d.index === index)?.uuid;
        if (uuid) uuids.push(uuid);
      }
    }
    const latest = (kind: string, series: string[]) =>
      series.length === 0
        ? Promise.resolve([])
        : this.d.db.sql.query<{ series: string; data: Record<string, number> }>(
            `SELECT DISTINCT ON (host_id, series) series, data FROM metric_samples
              WHERE host_id = ANY($1::text[]) AND kind = $2 AND series = ANY($3::text[]) AND at >= $4
              ORDER BY host_id, series, at DESC`,
            [hostIds, kind, series, since],
          );
    const [gpus, containers, hostSamples] = await Promise.all([
      latest('gpu', uuids),
      latest(
        'container',
        live.map((w) => w.id),
      ),
      latest('host', ['']),
    ]);
    const values = (rows: { data: Record<string, number> }[], key: string) =>
      rows.flatMap((r) => (typeof r.data[key] === 'number' ? [r.data[key]] : []));
    const sum = (list: number[]) => (list.length === 0 ? null : list.reduce((a, b) => a + b, 0));
    const gpuUtil = avg(values(gpus, 'utilizationPercent'));
    const memUsed = sum(values(gpus, 'memoryUsedBytes'));
    const memTotal = sum(values(gpus, 'memoryTotalBytes'));
    const temps = values(gpus, 'temperatureC');
    const hottest = temps.length === 0 ? null : Math.max(...temps);
    const warnings = hottest !== null && hottest >= HOT_GPU_C ? [`a worker GPU is at ${hottest} °C`] : [];
    const cpu = avg(values(containers, 'cpuPercent'));
    const cUsed = sum(values(containers, 'memoryUsedBytes'));
    const cTotal = sum(values(containers, 'memoryLimitBytes'));
    const load = avg(values(hostSamples, 'load1'));
    const usage = (used: number | null, total: number | null) =>
      used !== null && total ? round((used / total) * 100) : null;
    const statusOf = (present: boolean, degraded = false): Status =>
      !present ? 'unknown' : degraded ? 'degraded' : 'healthy';
    return {
      gpu: {
        status: statusOf(gpus.length > 0, warnings.length > 0),
        utilization: gpuUtil === null ? null : round(gpuUtil),
        memory: { used: memUsed, total: memTotal, usage: usage(memUsed, memTotal) },
        temperature: hottest,
        errors: [] as string[],
        warnings,
      },
      cpu: {
        status: statusOf(containers.length > 0),
        utilization: cpu === null ? null : round(cpu),
        cores: null,
        loadAverage: load === null ? null : round(load),
      },
      memory: { status: statusOf(cUsed !== null), used: cUsed, total: cTotal, usage: usage(cUsed, cTotal) },
      storage: { status: 'unknown' as Status, used: null, total: null, usage: null, iops: null },
    };
  }

  async #dependencies(hostIds: string[]) {
    const started = performance.now();
    let database: { name: string; status: Status; responseTime: number | null; error: string | null };
    try {
      await this.d.db.sql.query('SELECT 1');
      database = {
        name: 'database',
        status: 'healthy',
        responseTime: Math.round(performance.now() - started),
        error: null,
      };
    } catch (error) {
      database = {
        name: 'database',
        status: 'unhealthy',
        responseTime: null,
        error: (error as Error).message,
      };
    }
    const hosts = await this.d.db.prisma.host.findMany({
      where: { id: { in: hostIds } },
      select: { id: true, state: true, connectedReplicaId: true },
    });
    const services = [
      database,
      ...hosts.map((h) => ({
        name: `host:${h.id}`,
        status: (h.state === 'ready' && h.connectedReplicaId
          ? 'healthy'
          : h.state === 'unreachable'
            ? 'unhealthy'
            : 'degraded') as Status,
        responseTime: null,
        error: h.state === 'ready' ? null : `host is ${h.state}`,
      })),
    ];
    const status: Status = services.every((s) => s.status === 'healthy')
      ? 'healthy'
      : services.some((s) => s.status === 'unhealthy')
        ? 'unhealthy'
        : 'degraded';
    return { status, services };
  }

  /** Readiness: ready when at least one worker answers GET /health (every gate from real state). */
  async ready(actor: Actor, endpointId: string) {
    const endpoint = await this.d.endpoints.require(actor, endpointId, 'read');
    const workers = await this.d.db.prisma.endpointWorker.findMany({
      where: { endpointId: endpoint.id, status: { in: ['starting', 'ready', 'draining'] } },
    });
    const ready = workers.filter((w) => w.status === 'ready');
    const hosts = await this.d.db.prisma.host.findMany({
      where: { id: { in: [...new Set(ready.map((w) => w.hostId))] } },
      select: { state: true, connectedReplicaId: true },
    });
    const gates = {
      model: ready.length > 0,
      resources: workers.length > 0 || endpoint.targetWorkers === 0,
      dependencies: hosts.length > 0 && hosts.every((h) => h.state === 'ready'),
      networking: ready.some((w) => w.probeFailures === 0),
    };
    const ok = gates.model && gates.dependencies && gates.networking;
    return {
      ready: ok,
      checks: [
        { name: 'workers_ready', status: gates.model ? 'pass' : 'fail' },
        { name: 'workers_placed', status: gates.resources ? 'pass' : 'fail' },
        { name: 'hosts_reachable', status: gates.dependencies ? 'pass' : 'fail' },
        { name: 'worker_health_checks', status: gates.networking ? 'pass' : 'fail' },
      ],
      readinessGates: gates,
    };
  }

  /** Liveness: alive unless the endpoint is in error (its workers keep failing). */
  async live(actor: Actor, endpointId: string) {
    const endpoint = await this.d.endpoints.require(actor, endpointId, 'read');
    const now = this.d.clock.now();
    const oldest = await this.d.db.prisma.endpointWorker.findFirst({
      where: { endpointId: endpoint.id, status: 'ready' },
      orderBy: { readyAt: 'asc' },
    });
    return {
      alive: endpoint.status !== 'error',
      timestamp: now.toISOString(),
      uptime: oldest?.readyAt ? duration(now.getTime() - oldest.readyAt.getTime()) : null,
      version: `config-${endpoint.configVersion}`,
    };
  }
}

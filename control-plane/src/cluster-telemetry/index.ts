import type { Clock } from '../auth/clock.ts';
import type { ClusterAccess } from '../clusters/access.ts';
import type { ClusterViewParts } from '../clusters/view-parts.ts';
import type { Database } from '../db/index.ts';
import type { TelemetryRetention } from '../fleet/telemetry/telemetry.ts';
import { ClusterLogService } from './logs.ts';
import { ClusterMetricsService } from './metrics.ts';
import { DEFAULT_STREAM_OPTIONS, type LogStreamOptions } from './stream.ts';

export { ClusterLogService } from './logs.ts';
export { ClusterMetricsService } from './metrics.ts';

/** How often custom metric values past retention are deleted. */
const PURGE_INTERVAL_MS = 3_600_000;

/** Cluster metrics and logs (issue 4 points 5 and 6): built on the fleet's telemetry tables. */
export interface ClusterTelemetry {
  access: ClusterAccess;
  metrics: ClusterMetricsService;
  logs: ClusterLogService;
  /** Poll and heartbeat periods of GET /logs/stream (tests shorten them). */
  streamOptions: LogStreamOptions;
  start(): void;
  stop(): void;
}

export function createClusterTelemetry(deps: {
  db: Database;
  clock: Clock;
  retention: TelemetryRetention;
  access: ClusterAccess;
  onError?: (error: unknown) => void;
}): ClusterTelemetry {
  const metrics = new ClusterMetricsService(deps);
  let timer: NodeJS.Timeout | null = null;
  return {
    access: deps.access,
    metrics,
    logs: new ClusterLogService(deps),
    streamOptions: { ...DEFAULT_STREAM_OPTIONS },
    start() {
      timer ??= setInterval(() => {
        metrics.purge().catch((error) => deps.onError?.(error));
      }, PURGE_INTERVAL_MS);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}

/**
 * Contract 3: the cluster object's `metrics` — current GPU utilisation (mean over the cluster's GPUs),
 * memory utilisation (container memory used / limit × 100) and CPU utilisation (container CPU percent /
 * cpu_cores), from samples of the last five minutes; null when the cluster is not running or has none.
 */
export function metricsViewPart(metrics: ClusterMetricsService): NonNullable<ClusterViewParts['metrics']> {
  return (cluster) => metrics.current(cluster);
}

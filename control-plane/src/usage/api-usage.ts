import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Sql } from '../db/index.ts';
import { DURATION_BOUNDS_MS, estimateQuantile, type RequestLog } from './request-log.ts';

/** Periods GET /v2/analytics/api-usage accepts, and how far back each reaches. */
export const API_USAGE_PERIODS = {
  '1h': 3_600_000,
  '24h': 86_400_000,
  '7d': 7 * 86_400_000,
  '30d': 30 * 86_400_000,
  '90d': 90 * 86_400_000,
} as const;
export type ApiUsagePeriod = keyof typeof API_USAGE_PERIODS;
export const DEFAULT_API_USAGE_PERIOD: ApiUsagePeriod = '24h';

export interface RouteUsage {
  method: string;
  route: string;
  count: number;
  /** Responses with status 400 or above. */
  errorCount: number;
  avgDurationMs: number;
  /** Estimated from a histogram of durations (usage/request-log.ts); never above the slowest request. */
  p95DurationMs: number;
}

export interface KeyUsage {
  keyId: string | null;
  name: string | null;
  environment: string | null;
  count: number;
}

export interface ApiUsageReport {
  period: ApiUsagePeriod;
  periodStart: string;
  periodEnd: string;
  totalRequests: number;
  errorCount: number;
  /** errorCount / totalRequests (0 when there were no requests), 4 decimals. */
  errorRate: number;
  byRoute: RouteUsage[];
  byStatus: Record<string, number>;
  byKey: KeyUsage[];
}

export function isApiUsagePeriod(value: string): value is ApiUsagePeriod {
  return Object.hasOwn(API_USAGE_PERIODS, value);
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));

/** Analytics over the account's recorded requests (usage/request-log.ts). */
export class ApiUsageService {
  constructor(
    private readonly sql: Sql,
    private readonly clock: Clock,
    private readonly log: RequestLog,
  ) {}

  async report(accountId: string, period: string | undefined): Promise<ApiUsageReport> {
    const chosen = period ?? DEFAULT_API_USAGE_PERIOD;
    if (!isApiUsagePeriod(chosen)) {
      throw new ApiError(
        'INVALID_PERIOD',
        `period must be one of ${Object.keys(API_USAGE_PERIODS).join(', ')}`,
        {
          validPeriods: Object.keys(API_USAGE_PERIODS),
          received: chosen.length > 100 ? `${chosen.slice(0, 100)}…` : chosen,
        },
      );
    }
    // This process's buffered requests count too; other processes' arrive within their flush interval.
    await this.log.flush();
    const end = this.clock.now();
    // Requests are counted per minute: the period covers the minutes that start inside it.
    const start = new Date(end.getTime() - API_USAGE_PERIODS[chosen]);
    const range = [accountId, start.toISOString(), end.toISOString()];
    const where = 'account_id = $1 AND created_at >= $2 AND created_at <= $3';

    const routes = await this.sql.query<{
      method: string;
      route: string;
      count: number;
      error_count: number;
      total_ms: number;
      max_ms: number;
    }>(
      `SELECT method, route, sum(request_count)::int AS count,
              (coalesce(sum(request_count) FILTER (WHERE status_code >= 400), 0))::int AS error_count,
              sum(duration_ms)::float8 AS total_ms, max(greatest(duration_max_ms, duration_ms / request_count))::float8 AS max_ms
         FROM api_requests WHERE ${where}
        GROUP BY method, route ORDER BY count DESC, route, method`,
      range,
    );
    // Rows folded from the per-request log of before rollups carry no histogram: they count everywhere
    // except in the percentile estimate.
    const histograms = await this.sql.query<{ method: string; route: string; bucket: number; count: number }>(
      `SELECT method, route, (u.i - 1)::int AS bucket, sum(u.n)::int AS count
         FROM api_requests, unnest(duration_buckets) WITH ORDINALITY AS u(n, i)
        WHERE ${where}
        GROUP BY method, route, u.i`,
      range,
    );
    const statuses = await this.sql.query<{ status_code: number; count: number }>(
      `SELECT status_code, sum(request_count)::int AS count FROM api_requests WHERE ${where}
        GROUP BY status_code ORDER BY status_code`,
      range,
    );
    const keys = await this.sql.query<{
      key_id: string | null;
      name: string | null;
      environment: string | null;
      count: number;
    }>(
      `SELECT r.key_id, k.name, k.environment, sum(r.request_count)::int AS count
         FROM api_requests r LEFT JOIN api_keys k ON k.id = r.key_id
        WHERE r.account_id = $1 AND r.created_at >= $2 AND r.created_at <= $3
        GROUP BY r.key_id, k.name, k.environment ORDER BY count DESC, r.key_id`,
      range,
    );

    const histogramOf = new Map<string, number[]>();
    for (const row of histograms) {
      const key = `${row.method} ${row.route}`;
      let buckets = histogramOf.get(key);
      if (!buckets) {
        buckets = new Array<number>(DURATION_BOUNDS_MS.length + 1).fill(0);
        histogramOf.set(key, buckets);
      }
      buckets[row.bucket] = (buckets[row.bucket] ?? 0) + row.count;
    }
    const byStatus: Record<string, number> = {};
    let total = 0;
    let errors = 0;
    for (const row of statuses) {
      byStatus[String(row.status_code)] = row.count;
      total += row.count;
      if (row.status_code >= 400) errors += row.count;
    }
    return {
      period: chosen,
      periodStart: start.toISOString(),
      periodEnd: end.toISOString(),
      totalRequests: total,
      errorCount: errors,
      errorRate: total === 0 ? 0 : round(errors / total, 4),
      byRoute: routes.map((row) => {
        const buckets = histogramOf.get(`${row.method} ${row.route}`) ?? [];
        return {
          method: row.method,
          route: row.route,
          count: row.count,
          errorCount: row.error_count,
          avgDurationMs: round(row.total_ms / row.count, 3),
          p95DurationMs: round(estimateQuantile(buckets, 0.95, row.max_ms), 3),
        };
      }),
      byStatus,
      byKey: keys.map((row) => ({
        keyId: row.key_id,
        name: row.name,
        environment: row.environment,
        count: row.count,
      })),
    };
  }
}

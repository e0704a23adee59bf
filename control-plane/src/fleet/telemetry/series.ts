import type { Clock } from '../../auth/clock.ts';
import type { Database } from '../../db/index.ts';
import type { MetricKind, TelemetryRetention } from './telemetry.ts';

/**
 * Values that only grow (bytes and operations since boot, CPU time): a chart of them is a chart of
 * their rate, so they are answered as per-second rates, never as averages of the counter.
 */
const COUNTER =
  /^(net:.+:(rx|tx)(Bytes|Errors|Dropped)|diskIo:.+|cpuTotalNs|networkRxBytes|networkTxBytes|blockReadBytes|blockWriteBytes)$/;

export function isCounter(key: string): boolean {
  return COUNTER.test(key);
}

export interface SeriesRequest {
  hostId: string;
  kind: MetricKind;
  series?: string | undefined;
  /** Value names to answer; all of them when absent. */
  keys?: string[] | undefined;
  from: Date;
  to: Date;
  /** Most buckets answered; the bucket width follows from it. */
  points: number;
}

export interface SeriesAnswer {
  from: string;
  to: string;
  /** raw: from the samples (kept for the raw retention); 1m: from the one-minute rollups. */
  source: 'raw' | '1m';
  stepSeconds: number;
  /** Start of every bucket, epoch milliseconds, oldest first; every array below is aligned with it. */
  times: number[];
  series: {
    series: string;
    /** Gauges: the average of the bucket's samples; null where the bucket has none. */
    values: Record<string, (number | null)[]>;
    /** Counters: per-second increase to the bucket's last sample; null where unknown or reset. */
    rates: Record<string, (number | null)[]>;
  }[];
}

interface BucketRow {
  series: string;
  b: number;
  key: string;
  avg: number;
  first: number;
  first_at: Date | string;
  last: number;
  last_at: Date | string;
}

const ms = (value: Date | string) => new Date(value).getTime();

const RAW_MARGIN_MS = 5 * 60_000;

/**
 * Reads stored metrics as charts want them: a bounded number of equal time buckets over [from, to),
 * averaged in the database, so an hour or a day of samples of every GPU costs the browser a few
 * hundred points per line. Windows inside the raw retention read the raw samples; older ones read the
 * one-minute rollups (then a bucket is at least a minute).
 */
export class MetricSeriesReader {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly retention: Pick<TelemetryRetention, 'rawMetricsMs'>,
    /** How often agents sample: a raw bucket spans at least two intervals, so none is empty by jitter. */
    private readonly sampleSeconds: number,
  ) {}

  async read(request: SeriesRequest): Promise<SeriesAnswer> {
    const spanMs = request.to.getTime() - request.from.getTime();
    // A window of "the last day" asked a moment ago still reads the raw samples (the margin).
    const raw =
      request.from.getTime() >= this.clock.now().getTime() - this.retention.rawMetricsMs - RAW_MARGIN_MS;
    const minStep = raw ? 2 * this.sampleSeconds : 60;
    let stepSeconds = Math.max(minStep, Math.ceil(spanMs / 1000 / request.points));
    if (!raw) stepSeconds = Math.ceil(stepSeconds / 60) * 60;
    const buckets = Math.ceil(spanMs / 1000 / stepSeconds);
    const rows = raw ? await this.#raw(request, stepSeconds) : await this.#rollups(request, stepSeconds);
    const fromMs = request.from.getTime();
    const times = Array.from({ length: buckets }, (_, i) => fromMs + i * stepSeconds * 1000);

    const bySeries = new Map<string, Map<string, BucketRow[]>>();
    for (const row of rows) {
      const keys = bySeries.get(row.series) ?? new Map<string, BucketRow[]>();
      bySeries.set(row.series, keys);
      const list = keys.get(row.key) ?? [];
      keys.set(row.key, list);
      list.push({ ...row, b: Number(row.b) });
    }
    const series = [...bySeries.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, keys]) => {
        const values: Record<string, (number | null)[]> = {};
        const rates: Record<string, (number | null)[]> = {};
        for (const [key, list] of [...keys.entries()].sort(([a], [b]) => a.localeCompare(b))) {
          if (isCounter(key)) rates[key] = rateLine(list, buckets);
          else values[key] = avgLine(list, buckets);
        }
        return { series: name, values, rates };
      });
    return {
      from: request.from.toISOString(),
      to: request.to.toISOString(),
      source: raw ? 'raw' : '1m',
      stepSeconds,
      times,
      series,
    };
  }

  /** Per series, bucket and value: the average, and the first and last sample with their times. */
  async #raw(request: SeriesRequest, stepSeconds: number): Promise<BucketRow[]> {
    return this.db.sql.query<BucketRow>(
      `SELECT s.series, floor(extract(epoch FROM s.at - $4::timestamptz) / $6)::int AS b, e.key,
              avg(e.v) AS avg,
              (array_agg(e.v ORDER BY s.at, s.id))[1] AS first, min(s.at) AS first_at,
              (array_agg(e.v ORDER BY s.at DESC, s.id DESC))[1] AS last, max(s.at) AS last_at
       FROM metric_samples s
       CROSS JOIN LATERAL (
         SELECT j.key, (j.value #>> '{}')::float8 AS v FROM jsonb_each(s.data) AS j
         WHERE jsonb_typeof(j.value) = 'number' AND ($7::text[] IS NULL OR j.key = ANY($7))
       ) AS e
       WHERE s.host_id = $1 AND s.kind = $2 AND ($3::text IS NULL OR s.series = $3) AND s.at >= $4 AND s.at < $5
       GROUP BY 1, 2, 3`,
      this.#params(request, stepSeconds),
    );
  }

  /**
   * The same from one-minute rollups: averages weighted by each minute's samples; a counter's first and
   * last are the last values of the bucket's first and last minutes.
   */
  async #rollups(request: SeriesRequest, stepSeconds: number): Promise<BucketRow[]> {
    return this.db.sql.query<BucketRow>(
      `SELECT r.series, floor(extract(epoch FROM r.bucket - $4::timestamptz) / $6)::int AS b, e.key,
              sum(e.avg * r.samples) / nullif(sum(r.samples), 0) AS avg,
              (array_agg(e.last ORDER BY r.bucket))[1] AS first, min(r.bucket) AS first_at,
              (array_agg(e.last ORDER BY r.bucket DESC))[1] AS last, max(r.bucket) AS last_at
       FROM metric_rollups r
       CROSS JOIN LATERAL (
         SELECT j.key, (j.value ->> 'avg')::float8 AS avg, (j.value ->> 'last')::float8 AS last
         FROM jsonb_each(r.data) AS j
         WHERE jsonb_typeof(j.value) = 'object' AND ($7::text[] IS NULL OR j.key = ANY($7))
       ) AS e
       WHERE r.host_id = $1 AND r.kind = $2 AND ($3::text IS NULL OR r.series = $3) AND r.bucket >= $4 AND r.bucket < $5
       GROUP BY 1, 2, 3`,
      this.#params(request, stepSeconds),
    );
  }

  #params(request: SeriesRequest, stepSeconds: number): unknown[] {
    return [
      request.hostId,
      request.kind,
      request.series ?? null,
      request.from.toISOString(),
      request.to.toISOString(),
      stepSeconds,
      request.keys?.length ? request.keys : null,
    ];
  }
}

function avgLine(rows: BucketRow[], buckets: number): (number | null)[] {
  const line: (number | null)[] = new Array(buckets).fill(null);
  for (const row of rows) if (row.b >= 0 && row.b < buckets) line[row.b] = Number(row.avg);
  return line;
}

/**
 * A bucket's rate runs from the previous bucket's last sample (when that bucket has one) or else from
 * its own first sample, to its own last: so adjacent buckets share no increase and none is lost. A
 * decrease means the counter restarted (a reboot): no rate rather than a negative one.
 */
function rateLine(rows: BucketRow[], buckets: number): (number | null)[] {
  const line: (number | null)[] = new Array(buckets).fill(null);
  const byBucket = new Map(rows.map((row) => [row.b, row]));
  for (const row of rows) {
    if (row.b < 0 || row.b >= buckets) continue;
    const previous = byBucket.get(row.b - 1);
    const startValue = previous ? Number(previous.last) : Number(row.first);
    const startAt = previous ? ms(previous.last_at) : ms(row.first_at);
    const seconds = (ms(row.last_at) - startAt) / 1000;
    const delta = Number(row.last) - startValue;
    line[row.b] = seconds > 0 && delta >= 0 ? delta / seconds : null;
  }
  return line;
}

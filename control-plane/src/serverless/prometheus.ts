import { Gauge, type Registry } from 'prom-client';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';

/** Execution and delay percentiles are over the jobs finished in this window. */
export const PERCENTILE_WINDOW_MS = 15 * 60_000;

type Labels = 'endpoint_id' | 'account_id';

/**
 * Per-endpoint gauges on /metrics, read from the database at each scrape (every replica reports the same):
 * - anvil_endpoint_jobs{status=IN_QUEUE|IN_PROGRESS}: queue depth and jobs running;
 * - anvil_endpoint_workers{status=starting|ready|draining}: live workers;
 * - anvil_endpoint_execution_ms / anvil_endpoint_delay_ms {quantile=0.5|0.95}: executionTime and delayTime
 *   (queued to started, so a cold start is in it) of the jobs finished in the last PERCENTILE_WINDOW_MS;
 *   no sample when none finished;
 * - anvil_endpoint_cold_start_ms{quantile}: placement to ready of the workers that became ready in the window.
 */
export class EndpointMetrics {
  readonly #jobs: Gauge<Labels | 'status'>;
  readonly #workers: Gauge<Labels | 'status'>;
  readonly #execution: Gauge<Labels | 'quantile'>;
  readonly #delay: Gauge<Labels | 'quantile'>;
  readonly #coldStart: Gauge<Labels | 'quantile'>;
  /** The read under way: every gauge's collect joins it, so one scrape reads the database once. */
  #collecting: Promise<void> | null = null;

  constructor(
    registry: Registry,
    private readonly db: Database,
    private readonly clock: Clock,
  ) {
    const registers = [registry];
    const gauge = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Gauge<L>({ name, help, labelNames, registers, collect: () => this.#collectOnce() });
    this.#jobs = gauge('anvil_endpoint_jobs', 'Jobs of each endpoint by status (IN_QUEUE: queue depth)', [
      'endpoint_id',
      'account_id',
      'status',
    ]);
    this.#workers = gauge('anvil_endpoint_workers', 'Live workers of each endpoint by status', [
      'endpoint_id',
      'account_id',
      'status',
    ]);
    const windowText = `jobs finished in the last ${PERCENTILE_WINDOW_MS / 60_000} minutes`;
    this.#execution = gauge(
      'anvil_endpoint_execution_ms',
      `executionTime percentiles (started to finished) of the ${windowText}`,
      ['endpoint_id', 'account_id', 'quantile'],
    );
    this.#delay = gauge(
      'anvil_endpoint_delay_ms',
      `delayTime percentiles (queued to started, cold starts included) of the ${windowText}`,
      ['endpoint_id', 'account_id', 'quantile'],
    );
    this.#coldStart = gauge(
      'anvil_endpoint_cold_start_ms',
      `Cold start percentiles (worker placed to ready) of the workers ready in the last ${PERCENTILE_WINDOW_MS / 60_000} minutes`,
      ['endpoint_id', 'account_id', 'quantile'],
    );
  }

  /** prom-client runs each gauge's collect at a scrape, all at once: they share one read. */
  #collectOnce(): Promise<void> {
    this.#collecting ??= this.collect().finally(() => {
      this.#collecting = null;
    });
    return this.#collecting;
  }

  async collect(): Promise<void> {
    const since = new Date(this.clock.now().getTime() - PERCENTILE_WINDOW_MS);
    const [endpoints, workers, times, coldStarts] = await Promise.all([
      this.db.sql.query<{ id: string; account_id: string; queued: number; running: number }>(
        `SELECT e.id, e.account_id,
                (SELECT count(*) FROM endpoint_jobs j WHERE j.endpoint_id = e.id AND j.status = 'IN_QUEUE')::int AS queued,
                (SELECT count(*) FROM endpoint_jobs j WHERE j.endpoint_id = e.id AND j.status = 'IN_PROGRESS')::int AS running
           FROM endpoints e WHERE e.deleted_at IS NULL`,
      ),
      this.db.sql.query<{ endpoint_id: string; status: string; n: number }>(
        `SELECT endpoint_id, status, count(*)::int AS n FROM endpoint_workers
          WHERE status IN ('starting', 'ready', 'draining') GROUP BY 1, 2`,
      ),
      this.db.sql.query<Record<string, number | string | null>>(
        `SELECT endpoint_id,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)) AS e50,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)) AS e95,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - queued_at)) AS d50,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - queued_at)) AS d95
           FROM endpoint_jobs
          WHERE completed_at > $1 AND started_at IS NOT NULL GROUP BY endpoint_id`,
        [since],
      ),
      this.db.sql.query<Record<string, number | string | null>>(
        `SELECT endpoint_id,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ready_at - created_at)) AS c50,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM ready_at - created_at)) AS c95
           FROM endpoint_workers WHERE ready_at > $1 GROUP BY endpoint_id`,
        [since],
      ),
    ]);
    for (const g of [this.#jobs, this.#workers, this.#execution, this.#delay, this.#coldStart]) g.reset();
    const accountOf = new Map<string, string>();
    for (const e of endpoints) {
      accountOf.set(e.id, e.account_id);
      const labels = { endpoint_id: e.id, account_id: e.account_id };
      this.#jobs.set({ ...labels, status: 'IN_QUEUE' }, e.queued);
      this.#jobs.set({ ...labels, status: 'IN_PROGRESS' }, e.running);
      for (const status of ['starting', 'ready', 'draining']) this.#workers.set({ ...labels, status }, 0);
    }
    for (const w of workers) {
      const account = accountOf.get(w.endpoint_id);
      if (account)
        this.#workers.set({ endpoint_id: w.endpoint_id, account_id: account, status: w.status }, w.n);
    }
    const quantiles = (
      gauge: Gauge<Labels | 'quantile'>,
      rows: Record<string, number | string | null>[],
      p50: string,
      p95: string,
    ) => {
      for (const row of rows) {
        const endpointId = String(row['endpoint_id']);
        const account = accountOf.get(endpointId);
        if (!account) continue;
        for (const [quantile, key] of [
          ['0.5', p50],
          ['0.95', p95],
        ] as const) {
          const seconds = row[key];
          if (seconds === null || seconds === undefined) continue;
          gauge.set(
            { endpoint_id: endpointId, account_id: account, quantile },
            Math.round(Number(seconds) * 1000),
          );
        }
      }
    };
    quantiles(this.#execution, times, 'e50', 'e95');
    quantiles(this.#delay, times, 'd50', 'd95');
    quantiles(this.#coldStart, coldStarts, 'c50', 'c95');
  }
}

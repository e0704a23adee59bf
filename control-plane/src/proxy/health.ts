import type { Logger } from 'pino';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { type HealthCheck, healthCheckOf } from './types.ts';
import type { UpstreamPool } from './upstream.ts';

/** Outcome of one probe: the status the container answered, or why there was none. */
export type ProbeResult = { ok: true; status: number } | { ok: false; status: number | null; error: string };

/**
 * GET <path> over a fresh tunnel stream, `Connection: close`; the status line decides. Fails on
 * timeout, refused connection, or a status other than `expected_status`.
 */
export async function probe(
  pool: UpstreamPool,
  clusterId: string,
  port: number,
  check: HealthCheck,
  host: string,
): Promise<ProbeResult> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), check.timeout_seconds * 1000);
  let stream: Awaited<ReturnType<UpstreamPool['open']>> | null = null;
  try {
    stream = await pool.open(clusterId, port, abort.signal);
    const opened = stream;
    const status = await new Promise<number>((resolve, reject) => {
      let head = '';
      const fail = (error: Error) => reject(error);
      abort.signal.addEventListener('abort', () => fail(new Error('timed out')), { once: true });
      opened.on('error', fail);
      opened.on('data', (chunk: Buffer) => {
        head += chunk.toString('latin1');
        const match = /^HTTP\/1\.[01] (\d{3})/.exec(head);
        if (match) resolve(Number(match[1]));
        else if (head.length > 64 || head.includes('\n')) fail(new Error('not an HTTP response'));
      });
      opened.on('end', () => fail(new Error('closed without a response')));
      opened.write(
        `GET ${check.path} HTTP/1.1\r\nHost: ${host}\r\nUser-Agent: anvil-proxy-health\r\nConnection: close\r\n\r\n`,
      );
    });
    if (status === check.expected_status) return { ok: true, status };
    return { ok: false, status, error: `status ${status}, expected ${check.expected_status}` };
  } catch (error) {
    return { ok: false, status: null, error: abort.signal.aborted ? 'timed out' : (error as Error).message };
  } finally {
    clearTimeout(timer);
    stream?.destroy();
  }
}

/**
 * Runs every enabled health check of running clusters on its own interval, through the tunnel, and
 * stores the result: healthy after a success, unhealthy once `retries` consecutive checks failed.
 * Started and stopped with the proxy. Each control-plane replica runs its own checks.
 */
export class HealthScheduler {
  private timer: NodeJS.Timeout | null = null;
  private readonly due = new Map<string, number>();
  private readonly running = new Set<string>();
  private readonly inFlight = new Set<Promise<void>>();
  private ticking: Promise<void> | null = null;

  constructor(
    private readonly options: {
      db: Database;
      clock: Clock;
      pool: UpstreamPool;
      domain: string;
      logger: Logger;
      onChange(clusterId: string): void;
      tickMs?: number;
    },
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.options.tickMs ?? 1_000);
    this.timer.unref();
  }

  /** Stops the timer and waits for the pass and probes in flight (they write to the database). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.ticking;
    await Promise.allSettled([...this.inFlight]);
  }

  /** One pass: probe every mapping whose interval has elapsed (probes run concurrently). */
  tick(): Promise<void> {
    this.ticking ??= this.pass().finally(() => {
      this.ticking = null;
    });
    return this.ticking;
  }

  private async pass(): Promise<void> {
    try {
      const { db, clock } = this.options;
      const rows = await db.sql.query<{
        id: string;
        cluster_id: string;
        internal_port: number;
        health_check: unknown;
      }>(
        `SELECT m.id, m.cluster_id, m.internal_port, m.health_check FROM proxy_port_mappings m
         JOIN clusters c ON c.id = m.cluster_id JOIN proxy_settings s ON s.cluster_id = m.cluster_id
         WHERE c.status = 'running' AND c.deleted_at IS NULL AND s.enabled AND m.protocol = 'tcp'
           AND (m.health_check->>'enabled')::boolean IS TRUE`,
      );
      const nowMs = clock.now().getTime();
      const seen = new Set<string>();
      for (const row of rows) {
        seen.add(row.id);
        const check = healthCheckOf(row.health_check)!;
        if ((this.due.get(row.id) ?? 0) > nowMs || this.running.has(row.id)) continue;
        this.due.set(row.id, nowMs + check.interval_seconds * 1000);
        this.running.add(row.id);
        const probing: Promise<void> = this.check(row.id, row.cluster_id, row.internal_port, check)
          .catch((error: unknown) => {
            this.options.logger.warn({ err: error, port_id: row.id }, 'proxy health check failed');
          })
          .finally(() => {
            this.running.delete(row.id);
            this.inFlight.delete(probing);
          });
        this.inFlight.add(probing);
      }
      for (const id of this.due.keys()) if (!seen.has(id)) this.due.delete(id);
    } catch (error) {
      this.options.logger.warn({ err: error }, 'proxy health pass failed');
    }
  }

  private async check(id: string, clusterId: string, port: number, check: HealthCheck): Promise<void> {
    const host = `${clusterId}-${port}.${this.options.domain}`;
    const result = await probe(this.options.pool, clusterId, port, check, host);
    const at = this.options.clock.now();
    // Healthy on success; unhealthy once failures reach `retries`; unchanged (or null) before that.
    const rows = await this.options.db.sql.query<{ health_status: string | null; changed: boolean }>(
      `UPDATE proxy_port_mappings SET
         consecutive_failures = CASE WHEN $2 THEN 0 ELSE consecutive_failures + 1 END,
         health_status = CASE WHEN $2 THEN 'healthy'
                              WHEN consecutive_failures + 1 >= $3 THEN 'unhealthy'
                              ELSE health_status END,
         last_check = $4::timestamptz
       WHERE id = $1 RETURNING health_status`,
      [id, result.ok, check.retries, at.toISOString()],
    );
    if (!result.ok)
      this.options.logger.debug({ port_id: id, error: result.error }, 'proxy health check failed');
    if (rows.length > 0) this.options.onChange(clusterId);
  }
}

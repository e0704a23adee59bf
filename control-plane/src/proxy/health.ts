import type { Logger } from 'pino';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs } from '../db/index.ts';
import { DueLoop } from '../util/due-loop.ts';
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

/** Announced by a trigger when a cluster is created or its status changes (migration 20261128001900). */
const CLUSTER_STATUS_CHANNEL = 'anvil_cluster_status';

interface Mapping {
  id: string;
  cluster_id: string;
  internal_port: number;
  health_check: unknown;
}

/**
 * Runs every enabled health check of running clusters on its own interval, through the tunnel, and
 * stores the result: healthy after a success, unhealthy once `retries` consecutive checks failed.
 * Started and stopped with the proxy. Each control-plane replica runs its own checks.
 *
 * It does not poll the database: the list of checks is read at start, again when it may have changed
 * (kick(): a port or proxy setting changed through this process; a cluster's status changed anywhere,
 * announced by NOTIFY), and at the safety sweep (`sweepMs`, for a change no one announced: a port edited
 * through another replica). Between those, the loop sleeps until the next check falls due; with no
 * check configured, nothing runs but the sweep.
 */
export class HealthScheduler {
  private readonly due = new Map<string, number>();
  private readonly running = new Set<string>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly loop: DueLoop;
  private mappings: Mapping[] = [];
  /** When the list was last read (clock ms); -Infinity: to read at the next pass. */
  private listedAt = Number.NEGATIVE_INFINITY;
  private unlisten: (() => Promise<void>) | null = null;
  private started = false;

  constructor(
    private readonly options: {
      db: Database;
      clock: Clock;
      pool: UpstreamPool;
      domain: string;
      logger: Logger;
      onChange(clusterId: string): void;
      /** The least time between two passes. */
      tickMs?: number;
      /** The safety sweep: the list of checks is read again at least this often. */
      sweepMs?: number;
    },
  ) {
    this.loop = new DueLoop({
      run: () => this.pass(),
      onError: (error) => this.options.logger.warn({ err: error }, 'proxy health pass failed'),
      minGapMs: this.options.tickMs ?? 1_000,
      sweepMs: this.options.sweepMs ?? safetySweepMs(this.options.db),
    });
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.loop.start();
    void this.options.db
      .listen(CLUSTER_STATUS_CHANNEL, () => this.kick())
      .then(
        (unlisten) => {
          if (this.started) this.unlisten = unlisten;
          else void unlisten();
        },
        (error: unknown) => this.options.logger.warn({ err: error }, 'proxy health could not listen'),
      );
  }

  /** Stops the timer and waits for the pass and probes in flight (they write to the database). */
  async stop(): Promise<void> {
    this.started = false;
    await this.unlisten?.();
    this.unlisten = null;
    await this.loop.stop();
    await Promise.allSettled([...this.inFlight]);
  }

  /** The checks may have changed (a port, the proxy settings, a cluster's status): read them again now. */
  kick(): void {
    this.listedAt = Number.NEGATIVE_INFINITY;
    this.loop.wake();
  }

  /** The pass loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.loop.passes, wakeAt: this.loop.wakeAt };
  }

  /** One pass: probe every mapping whose interval has elapsed (probes run concurrently). */
  async tick(): Promise<void> {
    this.listedAt = Number.NEGATIVE_INFINITY;
    await this.pass();
  }

  /** Starts the probes due; resolves to the ms until the next one (or the sweep) is due. */
  private async pass(): Promise<number> {
    const { db, clock } = this.options;
    const sweepMs = this.options.sweepMs ?? safetySweepMs(db);
    if (clock.now().getTime() - this.listedAt >= sweepMs) {
      this.listedAt = clock.now().getTime();
      this.mappings = await db.sql.query<Mapping>(
        `SELECT m.id, m.cluster_id, m.internal_port, m.health_check FROM proxy_port_mappings m
         JOIN clusters c ON c.id = m.cluster_id JOIN proxy_settings s ON s.cluster_id = m.cluster_id
         WHERE c.status = 'running' AND c.deleted_at IS NULL AND s.enabled AND m.protocol = 'tcp'
           AND (m.health_check->>'enabled')::boolean IS TRUE`,
      );
    }
    const nowMs = clock.now().getTime();
    const seen = new Set<string>();
    let next = this.listedAt + sweepMs;
    for (const row of this.mappings) {
      seen.add(row.id);
      const check = healthCheckOf(row.health_check)!;
      const due = this.due.get(row.id) ?? 0;
      if (due > nowMs || this.running.has(row.id)) {
        next = Math.min(next, due);
        continue;
      }
      this.due.set(row.id, nowMs + check.interval_seconds * 1000);
      next = Math.min(next, nowMs + check.interval_seconds * 1000);
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
    return next - nowMs;
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

import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { DueLoop } from '../util/due-loop.ts';
import { outboundRequest } from '../util/outbound-guard.ts';
import type { JobQueue } from './jobs.ts';
import { viewJob } from './view.ts';

/** Webhook attempts: at once, then 10 s and 60 s later (RunPod retries twice, 10 s apart). */
export const WEBHOOK_DELAYS_MS = [10_000, 60_000];
const WEBHOOK_TIMEOUT_MS = 10_000;
/** A delivery claimed by a replica is its own for this long (then another may try). */
const WEBHOOK_CLAIM_MS = 30_000;
const PRUNE_EVERY_MS = 10 * 60_000;

/**
 * The queue's housekeeping, run by every replica (each statement is safe with several): leases that ran
 * out (the replica running the job died) and ttls that passed, the jobs' webhooks, and pruning.
 *
 * It does not poll: each pass reads from the data when the next thing falls due (the soonest lease end,
 * ttl, webhook attempt or prune) and sleeps until then. wake() brings a pass forward for changes this
 * replica makes or hears of (a job queued, finished, cancelled: the dispatcher's events, NOTIFYs from other
 * replicas included); passes stay at least `intervalMs` apart however often it is woken. The one timer left
 * besides that is the safety sweep (`sweepMs`, db/database.ts#safetySweepMs), for what no event announced
 * here: a lease claimed on another replica after this one's last pass, whose replica then died.
 */
export class QueueMaintenance {
  readonly #loop: DueLoop;
  #lastPrune = 0;

  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      jobs: JobQueue;
      allowPrivate: boolean;
      /** Jobs that reached a final status here (ttl): runsync waiters are told. */
      finished: (jobId: string) => void;
      requeued: () => void;
      logger: Logger;
    },
    intervalMs = 1_000,
    sweepMs = safetySweepMs(d.db),
  ) {
    this.#loop = new DueLoop({
      run: () => this.tick(),
      onError: (error) => this.d.logger.error({ err: error }, 'endpoint queue maintenance failed'),
      minGapMs: intervalMs,
      sweepMs,
    });
  }

  start(): void {
    this.#loop.start();
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** Something changed in the queue: a pass soon (at once, unless one ran less than intervalMs ago). */
  wake(): void {
    this.#loop.wake();
  }

  /** The pass loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.#loop.passes, wakeAt: this.#loop.wakeAt };
  }

  /** One pass; resolves to how long until the next thing falls due (ms, as the data says). */
  async tick(): Promise<number> {
    const requeued = await this.d.jobs.expireLeases();
    if (requeued > 0) {
      this.d.logger.warn({ jobs: requeued }, 'endpoint jobs whose lease ran out queued again');
      this.d.requeued();
    }
    for (const id of await this.d.jobs.expireTtl()) this.d.finished(id);
    await this.deliverWebhooks();
    const now = this.d.clock.now().getTime();
    if (now - this.#lastPrune >= PRUNE_EVERY_MS) {
      this.#lastPrune = now;
      await this.d.jobs.prune();
    }
    const [row] = await this.d.db.sql.query<{ due: Date | null }>(
      `SELECT LEAST(
                (SELECT min(lease_until) FROM endpoint_jobs WHERE status = 'IN_PROGRESS'),
                (SELECT min(expires_at) FROM endpoint_jobs WHERE status IN ('IN_QUEUE', 'IN_PROGRESS')),
                (SELECT min(webhook_next_at) FROM endpoint_jobs WHERE webhook_status = 'pending')) AS due`,
      [],
      'endpoint_maintenance_due',
    );
    const due = row?.due ? new Date(row.due).getTime() : Number.POSITIVE_INFINITY;
    return Math.max(0, Math.min(due, this.#lastPrune + PRUNE_EVERY_MS) - now);
  }

  /** Claims due deliveries (SKIP LOCKED, pushed into the future while in flight) and sends them. */
  async deliverWebhooks(): Promise<void> {
    const now = this.d.clock.now();
    const claimed = await this.d.db.sql.query<{ id: string }>(
      `UPDATE endpoint_jobs SET webhook_next_at = $2
        WHERE id IN (SELECT id FROM endpoint_jobs WHERE webhook_status = 'pending' AND webhook_next_at <= $1
                      ORDER BY webhook_next_at LIMIT 20 FOR UPDATE SKIP LOCKED)
        RETURNING id`,
      [now, new Date(now.getTime() + WEBHOOK_CLAIM_MS)],
    );
    await Promise.all(claimed.map(({ id }) => this.#deliver(id)));
  }

  async #deliver(jobId: string): Promise<void> {
    const job = await this.d.jobs.get(jobId);
    if (!job?.webhook) return;
    const body = JSON.stringify({ ...viewJob(job, this.d.clock.now()), endpointId: job.endpointId });
    let error: string | null = null;
    try {
      const status = await post(job.webhook, body, this.d.allowPrivate);
      if (status < 200 || status >= 300) error = `answered ${status}`;
    } catch (e) {
      error = (e as Error).message;
    }
    const attempts = job.webhookAttempts + 1;
    const delay = WEBHOOK_DELAYS_MS[attempts - 1];
    const status = error === null ? 'sent' : delay === undefined ? 'failed' : 'pending';
    const now = this.d.clock.now();
    await this.d.db.prisma.endpointJob.updateMany({
      where: { id: jobId, webhookStatus: 'pending' },
      data: {
        webhookStatus: status,
        webhookAttempts: attempts,
        webhookError: error,
        webhookNextAt: status === 'pending' ? new Date(now.getTime() + (delay ?? 0)) : null,
      },
    });
    if (error !== null)
      this.d.logger.warn({ job_id: jobId, attempts, err: error, status }, 'endpoint job webhook failed');
  }
}

/** POSTs JSON; private targets refused after DNS (the SSRF guard) unless allowed. Resolves to the status. */
function post(url: string, body: string, allowPrivate: boolean): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = outboundRequest(
      new URL(url),
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'user-agent': 'anvil-webhook',
        },
        timeout: WEBHOOK_TIMEOUT_MS,
      },
      allowPrivate,
      (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${WEBHOOK_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

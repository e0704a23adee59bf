import type { Prisma, PrismaClient } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { safetySweepMs } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { DueLoop } from '../util/due-loop.ts';
import type { Notifier } from './notifications.ts';
import type { SettingsService } from './settings.ts';

/**
 * The account webhook's outbox. An event is written to `webhook_events` in the transaction of the change
 * it reports (enqueueWebhookEvent, or the trigger on `clusters` for `cluster.status_changed`; migration
 * 20261125200000_webhook_events), so a committed change always gets its event and a rolled-back one
 * never does, whichever process or replica made it.
 *
 * Delivery: due events are claimed under a lease (FOR UPDATE SKIP LOCKED, so replicas share the work and
 * each attempt goes out once), then POSTed to the account webhook when it is enabled and lists the
 * event's type, signed as every settings webhook (notifications.ts); otherwise the event is marked
 * skipped with the reason. A failed attempt (network error, timeout, non-2xx) is retried after
 * RETRY_DELAYS_SECONDS; after the last it is marked failed. Events of one account go out in the order
 * they were recorded within a pass; each carries `sequence` (the outbox id: increasing in commit order
 * for changes of the same row) so a receiver can drop one that arrives after a newer one, as a retry may.
 */

/** Event types the outbox delivers (others in WEBHOOK_EVENTS are sent directly, as their features do). */
export const CLUSTER_STATUS_CHANGED_EVENT = 'cluster.status_changed';
export const MEMBER_JOINED_EVENT = 'member.joined';
export const MEMBER_REMOVED_EVENT = 'member.removed';
/** An endpoint entered status `error` (its workers keep failing); recorded by the endpoint supervisor. */
export const ENDPOINT_FAILED_EVENT = 'endpoint.failed';

/** Wait before the 2nd, 3rd, ... attempt; an event failing the last attempt is given up (6 attempts, ~2.6 h). */
export const RETRY_DELAYS_SECONDS = [10, 60, 300, 1800, 7200] as const;
/** Longer than a delivery may take (the notifier's 10 s timeout), so a live dispatcher keeps its claim. */
const LEASE_SECONDS = 60;
const BATCH = 100;
/** Delivered, skipped and failed events are kept this long. */
export const RETENTION_DAYS = 30;
const PURGE_EVERY_MS = 3_600_000;

interface EventRow {
  id: string;
  account_id: string;
  type: string;
  data: Record<string, unknown>;
  occurred_at: Date | string;
  attempts: number;
}

type Target = { url: string; secret: string | null; events: unknown[] } | { skipped: string };

/** Records an event in the caller's transaction (a Prisma transaction client). */
export function enqueueWebhookEvent(
  tx: Pick<PrismaClient, 'webhookEvent'>,
  event: { accountId: string; type: string; data: Record<string, unknown> },
) {
  return tx.webhookEvent.create({
    data: { accountId: event.accountId, type: event.type, data: event.data as Prisma.InputJsonObject },
  });
}

export interface WebhookOutboxDeps {
  db: Database;
  settings: SettingsService;
  notifier: Notifier;
  logger: Logger;
  /**
   * The least time between two passes (however many events are recorded meanwhile); 0 turns the loop
   * off (drain() still works). Passes otherwise run when an event is recorded (the NOTIFY of migration
   * 20261128001900_wake_notifications, from any replica) or a retry falls due.
   */
  pollMs?: number;
  /** The safety sweep: a pass at least this often, for what no NOTIFY announced (a dropped listener). */
  sweepMs?: number;
}

/** Announced by a trigger on every insert into webhook_events (migration 20261128001900). */
const CHANNEL = 'anvil_webhook_events';

export class WebhookOutbox {
  private running: Promise<number> | null = null;
  private lastPurge = 0;
  private loop: DueLoop | null = null;
  private unlisten: (() => Promise<void>) | null = null;

  constructor(private readonly deps: WebhookOutboxDeps) {}

  start(): void {
    const every = this.deps.pollMs ?? 1000;
    if (every <= 0 || this.loop) return;
    const loop = new DueLoop({
      run: () => this.tick(),
      onError: (error) => this.deps.logger.warn({ err: error }, 'webhook outbox pass failed'),
      minGapMs: every,
      sweepMs: this.deps.sweepMs ?? safetySweepMs(this.deps.db),
    });
    this.loop = loop;
    loop.start();
    void this.deps.db
      .listen(CHANNEL, () => loop.wake())
      .then(
        (unlisten) => {
          if (this.loop === loop) this.unlisten = unlisten;
          else void unlisten();
        },
        (error: unknown) => this.deps.logger.warn({ err: error }, 'webhook outbox could not listen'),
      );
  }

  async stop(): Promise<void> {
    const loop = this.loop;
    this.loop = null;
    await this.unlisten?.();
    this.unlisten = null;
    await loop?.stop();
    await this.running?.catch(() => {});
  }

  /** The background loop's state: passes so far and when the next one begins (tests read it). */
  get loopState(): { passes: number; wakeAt: number } {
    return { passes: this.loop?.passes ?? 0, wakeAt: this.loop?.wakeAt ?? Number.POSITIVE_INFINITY };
  }

  /** One pass: delivers what is due, purges now and then; resolves to the ms until the next event is due. */
  private async tick(): Promise<number> {
    await this.drain();
    if (Date.now() - this.lastPurge > PURGE_EVERY_MS) {
      this.lastPurge = Date.now();
      await this.purge();
    }
    // Measured on the database's clock, as next_attempt_at and lease_until are written.
    const [row] = await this.deps.db.sql.query<{ ms: number | null }>(
      `SELECT (extract(epoch FROM min(GREATEST(next_attempt_at, COALESCE(lease_until, next_attempt_at)))
                 - clock_timestamp()) * 1000)::float8 AS ms
         FROM webhook_events WHERE delivery = 'pending'`,
      [],
      'webhook_events_due',
    );
    const dueInMs = row?.ms ?? Number.POSITIVE_INFINITY;
    return Math.min(dueInMs, this.lastPurge + PURGE_EVERY_MS - Date.now());
  }

  /**
   * Delivers every event due now; resolves to how many were handled (sent, skipped or retried). A call
   * while a pass runs waits for it and makes its own, so it sees what was committed before it was made.
   */
  async drain(): Promise<number> {
    while (this.running) await this.running.catch(() => {});
    const pass = (async () => {
      let handled = 0;
      for (;;) {
        const batch = await this.claim();
        if (batch.length === 0) return handled;
        await this.deliver(batch);
        handled += batch.length;
      }
    })();
    this.running = pass;
    try {
      return await pass;
    } finally {
      if (this.running === pass) this.running = null;
    }
  }

  /** Removes finished events older than RETENTION_DAYS; returns how many. */
  async purge(): Promise<number> {
    const rows = await this.deps.db.sql.query<{ n: number }>(
      `WITH gone AS (DELETE FROM webhook_events
          WHERE delivery <> 'pending' AND occurred_at < clock_timestamp() - make_interval(days => $1)
          RETURNING 1)
       SELECT count(*)::int AS n FROM gone`,
      [RETENTION_DAYS],
    );
    return rows[0]?.n ?? 0;
  }

  /**
   * Claims due events. "Now" is rounded to milliseconds as the columns are: PostgreSQL rounds a time stored
   * in TIMESTAMPTZ(3) to the nearest millisecond, so an event made due at clock_timestamp() may be stored up
   * to 0.5 ms ahead of it, and compared with the unrounded clock it would wait for the next pass. Rounding
   * both sides keeps "due now" due now (rounding never reorders times).
   */
  private claim(): Promise<EventRow[]> {
    return this.deps.db.sql.query<EventRow>(
      `UPDATE webhook_events
          SET lease_until = clock_timestamp() + make_interval(secs => $1), attempts = attempts + 1
        WHERE id IN (
          SELECT id FROM webhook_events
           WHERE delivery = 'pending' AND next_attempt_at <= clock_timestamp()::timestamptz(3)
             AND (lease_until IS NULL OR lease_until <= clock_timestamp()::timestamptz(3))
           ORDER BY id LIMIT $2
           FOR UPDATE SKIP LOCKED)
        RETURNING id::text AS id, account_id, type, data, occurred_at, attempts`,
      [LEASE_SECONDS, BATCH],
      'webhook_events_claim',
    );
  }

  private async deliver(batch: EventRow[]): Promise<void> {
    batch.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
    const byAccount = new Map<string, EventRow[]>();
    for (const event of batch) {
      const list = byAccount.get(event.account_id) ?? [];
      list.push(event);
      byAccount.set(event.account_id, list);
    }
    await Promise.all(
      [...byAccount].map(async ([accountId, events]) => {
        const target = await this.target(accountId);
        if ('skipped' in target) {
          await this.finish(events, 'skipped', target.skipped);
          return;
        }
        const unwanted = events.filter((e) => !target.events.includes(e.type));
        for (const type of new Set(unwanted.map((e) => e.type))) {
          await this.finish(
            unwanted.filter((e) => e.type === type),
            'skipped',
            `${type} is not among the webhook's events`,
          );
        }
        for (const event of events) if (target.events.includes(event.type)) await this.post(target, event);
      }),
    );
  }

  private async target(accountId: string): Promise<Target> {
    let settings: Record<string, unknown>;
    try {
      settings = await this.deps.settings.effective(accountId);
    } catch {
      return { skipped: 'the account no longer exists' };
    }
    const webhook = ((settings['notifications'] ?? {}) as Record<string, unknown>)['webhook'] as
      | Record<string, unknown>
      | undefined;
    if (webhook?.['enabled'] !== true || typeof webhook['url'] !== 'string')
      return { skipped: 'the account webhook is not enabled' };
    return {
      url: webhook['url'],
      secret: typeof webhook['secret'] === 'string' ? webhook['secret'] : null,
      events: Array.isArray(webhook['events']) ? (webhook['events'] as unknown[]) : [],
    };
  }

  private async post(target: { url: string; secret: string | null }, event: EventRow): Promise<void> {
    try {
      const sent = await this.deps.notifier.webhook(target.url, target.secret, {
        type: event.type,
        accountId: event.account_id,
        data: {
          ...event.data,
          occurred_at: new Date(event.occurred_at).toISOString(),
          sequence: event.id,
          attempt: event.attempts,
        },
      });
      await this.deps.db.sql.query(
        `UPDATE webhook_events
            SET delivery = 'sent', delivery_id = $2, delivered_at = clock_timestamp(), lease_until = NULL, detail = NULL
          WHERE id = $1::bigint`,
        [event.id, sent.id],
      );
    } catch (error) {
      const message = (error as Error).message;
      const delay = RETRY_DELAYS_SECONDS[event.attempts - 1];
      this.deps.logger.warn(
        {
          err: error,
          accountId: event.account_id,
          type: event.type,
          eventId: event.id,
          attempt: event.attempts,
        },
        delay === undefined ? 'webhook event given up' : 'webhook event failed; will retry',
      );
      if (delay === undefined) {
        await this.finish([event], 'failed', message);
        return;
      }
      await this.deps.db.sql.query(
        `UPDATE webhook_events
            SET next_attempt_at = clock_timestamp() + make_interval(secs => $2), lease_until = NULL, detail = $3
          WHERE id = $1::bigint`,
        [event.id, delay, message],
      );
    }
  }

  private async finish(events: EventRow[], delivery: 'skipped' | 'failed', detail: string): Promise<void> {
    await this.deps.db.sql.query(
      `UPDATE webhook_events SET delivery = $2, detail = $3, lease_until = NULL
        WHERE id = ANY($1::bigint[])`,
      [events.map((e) => e.id), delivery, detail],
    );
  }
}

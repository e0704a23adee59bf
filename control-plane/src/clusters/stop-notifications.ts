import { ApiError } from '@anvil/shared';
import type { Notifier } from '../accounts/notifications.ts';
import { preferencesOf } from '../accounts/profile.ts';
import type { Clock } from '../auth/clock.ts';
import type { Cluster } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import type { SnapshotRecord, StopOptions } from './operation-options.ts';

/**
 * Notifications of a cluster stop: each member listed in the stop's notify_users gets an e-mail, and the
 * account's webhook and chat webhook hear of it, when the stop completes — or fails: its state was to be
 * saved and the snapshot failed, or a delete took over before it completed. Every delivery's result is
 * kept in the operation (`notifications`), so GET shows who was told what.
 */

/** Webhook event type of a stop that ended (listed in notifications.webhook.events to receive it). */
export const CLUSTER_STOPPED_EVENT = 'cluster.stopped';

/** Members who may be named: everyone in the account but removed members (as the team list shows). */
const MEMBER_STATUSES = ['active', 'suspended'];

export type DeliveryStatus = 'pending' | 'sent' | 'failed' | 'skipped';

export interface UserDelivery {
  user_id: string;
  name: string | null;
  /** The address the e-mail went (or would have gone) to. */
  email: string | null;
  status: DeliveryStatus;
  /** Why it was skipped, or how it failed. */
  detail: string | null;
  /** The SMTP server's message id. */
  message_id: string | null;
  at: string | null;
}

export interface ChannelDelivery {
  status: DeliveryStatus;
  detail: string | null;
  /** The webhook event id (X-Anvil-Delivery); null for chat. */
  delivery_id: string | null;
  at: string | null;
}

export interface StopNotifications {
  /** pending until the stop ends; sending while being delivered (a runner that dies mid-way is replaced); done. */
  state: 'pending' | 'sending' | 'done';
  outcome: 'stopped' | 'failed' | null;
  /** Why the stop failed, when it did. */
  reason: string | null;
  users: UserDelivery[];
  webhook: ChannelDelivery | null;
  slack: ChannelDelivery | null;
  sent_at: string | null;
}

/** What the deliveries say about the stop they report on. */
export interface StopReport {
  started_at: string;
  completed_at: string | null;
  options: StopOptions;
  snapshot: SnapshotRecord;
  notes: string[];
  requested_by: string | null;
}

export interface StopOutcome {
  outcome: 'stopped' | 'failed';
  reason: string | null;
  /** The cluster's status as the notifications go out. */
  status: 'stopped' | 'deleting';
}

export function pendingNotifications(userIds: string[]): StopNotifications {
  return {
    state: 'pending',
    outcome: null,
    reason: null,
    users: userIds.map((id) => ({
      user_id: id,
      name: null,
      email: null,
      status: 'pending',
      detail: null,
      message_id: null,
      at: null,
    })),
    webhook: null,
    slack: null,
    sent_at: null,
  };
}

/** A stop that reached `completed`: failed only when its state was to be saved and was not. */
export function completedOutcome(stop: StopReport): StopOutcome {
  if (stop.snapshot.enabled && !stop.snapshot.snapshot_id) {
    return {
      outcome: 'failed',
      reason: `the cluster stopped, but its state was not saved: ${stop.snapshot.error ?? 'no snapshot was made'}`,
      status: 'stopped',
    };
  }
  return { outcome: 'stopped', reason: null, status: 'stopped' };
}

export const INTERRUPTED: StopOutcome = {
  outcome: 'failed',
  reason: 'the cluster is being deleted: the delete took over before the stop completed',
  status: 'deleting',
};

/**
 * notify_users, deduplicated; 400 INVALID_PARAMETERS naming every id that is not a member of the
 * account (another account's user, a removed member, a made-up id).
 */
export async function checkNotifyUsers(db: Database, accountId: string, ids: string[]): Promise<string[]> {
  const unique = [...new Set(ids)];
  if (unique.length === 0) return [];
  const members = await db.prisma.user.findMany({
    where: { id: { in: unique }, accountId, status: { in: MEMBER_STATUSES } },
    select: { id: true },
  });
  const known = new Set(members.map((m) => m.id));
  const bad = unique.filter((id) => !known.has(id));
  if (bad.length > 0) {
    throw new ApiError(
      'INVALID_PARAMETERS',
      `notify_users: ${bad.join(', ')} ${bad.length === 1 ? 'is not a member' : 'are not members'} of the cluster's account`,
      { notify_users: `not members of the cluster's account: ${bad.join(', ')}`, invalid_user_ids: bad },
    );
  }
  return unique;
}

interface Channels {
  webhook: { url: string; secret: string | null } | { skipped: string };
  slack: { url: string; channel: string | null } | { skipped: string };
}

/** The account's channels for this event, from its notification settings (as usage alerts read them). */
function channelsOf(notifications: Record<string, unknown>): Channels {
  const section = (name: string) => (notifications[name] ?? {}) as Record<string, unknown>;
  const webhook = section('webhook');
  const slack = section('slack');
  const events = Array.isArray(webhook['events']) ? (webhook['events'] as string[]) : [];
  const slackAlerts = (slack['alerts'] ?? {}) as Record<string, unknown>;
  return {
    webhook:
      webhook['enabled'] !== true || typeof webhook['url'] !== 'string'
        ? { skipped: 'the account webhook is not enabled' }
        : !events.includes(CLUSTER_STOPPED_EVENT)
          ? { skipped: `${CLUSTER_STOPPED_EVENT} is not among the webhook's events` }
          : {
              url: webhook['url'],
              secret: typeof webhook['secret'] === 'string' ? webhook['secret'] : null,
            },
    slack:
      slack['enabled'] !== true || typeof slack['webhook_url'] !== 'string'
        ? { skipped: 'chat notifications are not enabled' }
        : slackAlerts['cluster_events'] !== true
          ? { skipped: 'chat alerts.cluster_events is off' }
          : {
              url: slack['webhook_url'],
              channel: typeof slack['channel'] === 'string' ? slack['channel'] : null,
            },
  };
}

function describe(cluster: Cluster, stop: StopReport, outcome: StopOutcome): string {
  const lines = [
    outcome.outcome === 'stopped'
      ? `Cluster "${cluster.name}" (${cluster.id}) was stopped.`
      : `Stopping cluster "${cluster.name}" (${cluster.id}) failed: ${outcome.reason}.`,
    `Stop requested at ${stop.started_at}${stop.options.stop_reason ? `, reason: ${stop.options.stop_reason}` : ''}.`,
  ];
  if (stop.snapshot.snapshot_id) lines.push(`State saved as snapshot ${stop.snapshot.name}.`);
  for (const note of stop.notes) lines.push(`Note: ${note}`);
  return lines.join('\n');
}

export interface StopNotifierDeps {
  db: Database;
  clock: Clock;
  notifier: Notifier;
  settings: { effective(accountId: string): Promise<Record<string, unknown>> };
  logger: Logger;
}

/** Sends a stop's notifications on every channel that applies, and returns each one's result. */
export class StopNotifier {
  constructor(private readonly d: StopNotifierDeps) {}

  async deliver(
    cluster: Cluster,
    stop: StopReport,
    outcome: StopOutcome,
    pending: StopNotifications,
  ): Promise<StopNotifications> {
    const [settings, users] = await Promise.all([
      this.d.settings.effective(cluster.accountId),
      this.d.db.prisma.user.findMany({
        where: { id: { in: pending.users.map((u) => u.user_id) }, accountId: cluster.accountId },
      }),
    ]);
    const byId = new Map(users.map((u) => [u.id, u]));
    const channels = channelsOf((settings['notifications'] ?? {}) as Record<string, unknown>);
    const text = describe(cluster, stop, outcome);
    const named = pending.users.map((u) => ({
      user_id: u.user_id,
      name: byId.get(u.user_id)?.name ?? null,
      email: byId.get(u.user_id)?.email ?? null,
    }));
    const now = () => this.d.clock.now().toISOString();
    const failure = (channel: string, error: unknown) => {
      this.d.logger.warn({ err: error, clusterId: cluster.id, channel }, 'stop notification failed');
      return (error as Error).message;
    };

    const webhook = async (): Promise<ChannelDelivery> => {
      const target = channels.webhook;
      if ('skipped' in target)
        return { status: 'skipped', detail: target.skipped, delivery_id: null, at: now() };
      try {
        const sent = await this.d.notifier.webhook(target.url, target.secret, {
          type: CLUSTER_STOPPED_EVENT,
          accountId: cluster.accountId,
          data: {
            cluster_id: cluster.id,
            cluster_name: cluster.name,
            status: outcome.status,
            outcome: outcome.outcome,
            reason: outcome.reason,
            stop_type: stop.options.force ? 'force' : 'graceful',
            stop_reason: stop.options.stop_reason,
            requested_by: stop.requested_by,
            stop_initiated_at: stop.started_at,
            completed_at: stop.completed_at,
            snapshot: {
              requested: stop.snapshot.enabled,
              snapshot_id: stop.snapshot.snapshot_id,
              snapshot_name: stop.snapshot.name,
              error: stop.snapshot.error,
            },
            notes: stop.notes,
            notify_users: named,
          },
        });
        return { status: 'sent', detail: null, delivery_id: sent.id, at: now() };
      } catch (error) {
        return { status: 'failed', detail: failure('webhook', error), delivery_id: null, at: now() };
      }
    };

    const slack = async (): Promise<ChannelDelivery> => {
      const target = channels.slack;
      if ('skipped' in target)
        return { status: 'skipped', detail: target.skipped, delivery_id: null, at: now() };
      const who = named.map((u) => u.name ?? u.email ?? u.user_id);
      try {
        await this.d.notifier.chat(target.url, {
          text: `${outcome.outcome === 'stopped' ? ':octagonal_sign:' : ':x:'} ${text}${who.length > 0 ? `\nNotified: ${who.join(', ')}` : ''}`,
          channel: target.channel,
        });
        return { status: 'sent', detail: null, delivery_id: null, at: now() };
      } catch (error) {
        return { status: 'failed', detail: failure('slack', error), delivery_id: null, at: now() };
      }
    };

    const email = async (entry: (typeof named)[number]): Promise<UserDelivery> => {
      const user = byId.get(entry.user_id);
      const result = (status: DeliveryStatus, detail: string | null, messageId: string | null = null) => ({
        ...entry,
        status,
        detail,
        message_id: messageId,
        at: now(),
      });
      if (!user || !MEMBER_STATUSES.includes(user.status))
        return result('skipped', 'no longer a member of the account');
      if (user.status !== 'active') return result('skipped', `the member is ${user.status}`);
      if (!preferencesOf(user).emailNotifications)
        return result('skipped', "e-mail notifications are off in the member's preferences");
      if (!this.d.notifier.emailConfigured)
        return result('skipped', 'e-mail is not configured on this Anvil (ANVIL_SMTP_URL)');
      try {
        const sent = await this.d.notifier.email({
          to: user.email,
          subject:
            outcome.outcome === 'stopped'
              ? `Anvil: cluster ${cluster.name} stopped`
              : `Anvil: stopping cluster ${cluster.name} failed`,
          text,
        });
        return result('sent', null, sent.messageId);
      } catch (error) {
        return result('failed', failure('email', error));
      }
    };

    const [webhookResult, slackResult, ...userResults] = await Promise.all([
      webhook(),
      slack(),
      ...named.map(email),
    ]);
    return {
      state: 'done',
      outcome: outcome.outcome,
      reason: outcome.reason,
      users: userResults as UserDelivery[],
      webhook: webhookResult as ChannelDelivery,
      slack: slackResult as ChannelDelivery,
      sent_at: now(),
    };
  }
}

import { ApiError, newId } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { Notifier } from '../accounts/notifications.ts';
import type { SettingsService } from '../accounts/settings.ts';
import type { Clock } from '../auth/clock.ts';
import type { Prisma, UsageAlert } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { startOf } from './periods.ts';
import type { UsageRecords } from './records.ts';
import { round, totalsOf, type UsageReports } from './reports.ts';

/**
 * Usage alerts: the account's rules (usage_alerts) and the billing settings' cost_alerts, evaluated on a
 * timer (and by evaluateAll/evaluateAccount directly). A rule watches the current calendar period —
 * daily, weekly (ISO, from Monday) or monthly — in the account's billing time zone: `cost` is the USD
 * spent, `compute_hours` the running hours of GPU sessions (clusters, training jobs, endpoint workers),
 * both from usage records plus open sessions. When the
 * value reaches the threshold, one trigger row is inserted for (rule, period start) — a unique key, so
 * concurrent evaluators and repeated runs record it once — and only the evaluator that inserted it
 * notifies: webhook event `cost.threshold_exceeded` (when the webhook is enabled and lists that event;
 * signed like every settings webhook), chat message (slack enabled with cost_thresholds on), e-mail
 * (email enabled with cost_alerts on, and SMTP configured). Each channel's result is kept on the trigger.
 */

export const ALERT_TYPES = ['cost', 'compute_hours'] as const;
export type AlertType = (typeof ALERT_TYPES)[number];
export const ALERT_PERIODS = ['daily', 'weekly', 'monthly'] as const;
export type AlertPeriod = (typeof ALERT_PERIODS)[number];
export const COST_THRESHOLD_EVENT = 'cost.threshold_exceeded';

export interface CreateAlertInput {
  name: string;
  type?: AlertType | undefined;
  threshold: number;
  period?: AlertPeriod | undefined;
  enabled?: boolean | undefined;
}

interface Rule {
  id: string;
  ruleKey: string;
  alertId: string | null;
  source: 'rule' | 'settings';
  name: string;
  type: AlertType;
  threshold: number;
  period: AlertPeriod;
  enabled: boolean;
}

interface ChannelResult {
  channel: 'webhook' | 'slack' | 'email';
  status: 'sent' | 'failed';
  at: string;
  error?: string;
  deliveryId?: string;
}

const UNIT: Record<AlertPeriod, 'day' | 'week' | 'month'> = {
  daily: 'day',
  weekly: 'week',
  monthly: 'month',
};

export class UsageAlerts {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      settings: SettingsService;
      notifier: Notifier;
      records: UsageRecords;
      reports: UsageReports;
      intervalSeconds: number;
      logger: Logger;
    },
  ) {}

  start(): void {
    if (this.deps.intervalSeconds <= 0 || this.timer) return;
    this.timer = setInterval(() => {
      void this.evaluateAll().catch((error: unknown) =>
        this.deps.logger.warn({ err: error }, 'usage alert evaluation failed'),
      );
    }, this.deps.intervalSeconds * 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running?.catch(() => {});
  }

  // ---- API ----

  async create(actor: Actor, input: CreateAlertInput) {
    const member = await this.deps.reports.requireBilling(actor, 'manage_billing');
    const now = this.deps.clock.now();
    const row = await this.deps.db.prisma.usageAlert.create({
      data: {
        id: newId('alert'),
        accountId: member.accountId,
        name: input.name,
        type: input.type ?? 'cost',
        threshold: input.threshold,
        period: input.period ?? 'monthly',
        enabled: input.enabled ?? true,
        createdById: member.userId,
        createdAt: now,
        updatedAt: now,
      },
    });
    return ruleView(row);
  }

  async listRules(actor: Actor) {
    const member = await this.deps.reports.requireBilling(actor);
    const rows = await this.deps.db.prisma.usageAlert.findMany({
      where: { accountId: member.accountId },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    return { rules: rows.map(ruleView) };
  }

  async delete(actor: Actor, alertId: string) {
    const member = await this.deps.reports.requireBilling(actor, 'manage_billing');
    const deleted = await this.deps.db.prisma.usageAlert.deleteMany({
      where: { id: alertId, accountId: member.accountId },
    });
    if (deleted.count === 0) {
      throw new ApiError('USAGE_ALERT_NOT_FOUND', `no usage alert ${alertId} in this account`, { alertId });
    }
    return { id: alertId, deleted: true as const };
  }

  /** GET /usage/alerts: every rule with its current-period value and trigger, and the channels. */
  async status(actor: Actor) {
    const member = await this.deps.reports.requireBilling(actor);
    const accountId = member.accountId;
    const { rules, settings, zone } = await this.rulesOf(accountId);
    const now = this.deps.clock.now();
    const values = await this.currentValues(accountId, rules, zone, now);
    const starts = rules.map((r) => startOf(UNIT[r.period], now, zone));
    const triggers = rules.length
      ? await this.deps.db.prisma.usageAlertTrigger.findMany({
          where: { accountId, ruleKey: { in: rules.map((r) => r.ruleKey) } },
          orderBy: { triggeredAt: 'desc' },
        })
      : [];
    const notifications = settings.notifications as Record<string, Record<string, unknown>>;
    const channels = channelsOf(notifications, this.deps.notifier.emailConfigured);
    return {
      alerts: rules.map((rule, i) => {
        const current = values[i]!;
        const trigger = triggers.find(
          (t) => t.ruleKey === rule.ruleKey && t.periodStart.getTime() === starts[i]!.getTime(),
        );
        const sent = trigger
          ? (trigger.notifications as unknown as ChannelResult[]).filter((n) => n.status === 'sent').length
          : 0;
        return {
          id: rule.id,
          name: rule.name,
          type: rule.type,
          threshold: rule.threshold,
          current: round(current),
          percentage: rule.threshold > 0 ? round((100 * current) / rule.threshold, 2) : 100,
          status: !rule.enabled ? 'disabled' : trigger ? 'triggered' : 'ok',
          triggeredAt: trigger ? trigger.triggeredAt.toISOString() : null,
          notificationsSent: sent,
          period: rule.period,
          periodStart: starts[i]!.toISOString(),
          source: rule.source,
          enabled: rule.enabled,
          notifications: trigger ? (trigger.notifications as unknown as ChannelResult[]) : [],
        };
      }),
      settings: {
        emailNotifications: channels.email !== null,
        slackNotifications: channels.slack !== null,
        webhookUrl: channels.webhook?.url ?? null,
      },
    };
  }

  // ---- evaluation ----

  /** Evaluates every account with an enabled rule or a billing cost alert. Runs one at a time. */
  async evaluateAll(): Promise<void> {
    if (this.running) return this.running;
    this.running = (async () => {
      const rows = await this.deps.db.sql.query<{ account_id: string }>(
        `SELECT DISTINCT account_id FROM usage_alerts WHERE enabled
         UNION
         SELECT account_id FROM account_settings
          WHERE jsonb_typeof(data->'billing'->'cost_alerts') = 'array'
            AND jsonb_array_length(data->'billing'->'cost_alerts') > 0`,
      );
      for (const { account_id } of rows) {
        await this.evaluateAccount(account_id).catch((error: unknown) =>
          this.deps.logger.warn({ err: error, accountId: account_id }, 'usage alert evaluation failed'),
        );
      }
    })().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** Evaluates one account's rules now; returns the triggers it recorded (and notified). */
  async evaluateAccount(accountId: string) {
    const { rules, settings, zone } = await this.rulesOf(accountId);
    const active = rules.filter((r) => r.enabled);
    if (active.length === 0) return [];
    const now = this.deps.clock.now();
    const values = await this.currentValues(accountId, active, zone, now);
    const recorded = [];
    for (const [i, rule] of active.entries()) {
      const value = values[i]!;
      if (value < rule.threshold) continue;
      const periodStart = startOf(UNIT[rule.period], now, zone);
      const id = newId('alert');
      const inserted = await this.deps.db.sql.query<{ id: string }>(
        `INSERT INTO usage_alert_triggers
           (id, account_id, alert_id, rule_key, type, period, period_start, threshold, value, triggered_at, notifications)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, '[]'::jsonb)
         ON CONFLICT (account_id, rule_key, period_start) DO NOTHING
         RETURNING id`,
        [
          id,
          accountId,
          rule.alertId,
          rule.ruleKey,
          rule.type,
          rule.period,
          periodStart,
          rule.threshold,
          value,
          now,
        ],
      );
      if (inserted.length === 0) continue;
      const results = await this.notify(accountId, settings, rule, value, periodStart);
      await this.deps.db.prisma.usageAlertTrigger.update({
        where: { id },
        data: { notifications: results as unknown as Prisma.InputJsonValue },
      });
      recorded.push({ id, ruleKey: rule.ruleKey, value, notifications: results });
    }
    return recorded;
  }

  private async rulesOf(accountId: string) {
    const [rows, settings] = await Promise.all([
      this.deps.db.prisma.usageAlert.findMany({
        where: { accountId },
        orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      }),
      this.deps.settings.effective(accountId),
    ]);
    const rules: Rule[] = rows.map((row) => ({
      id: row.id,
      ruleKey: row.id,
      alertId: row.id,
      source: 'rule',
      name: row.name,
      type: row.type as AlertType,
      threshold: row.threshold,
      period: row.period as AlertPeriod,
      enabled: row.enabled,
    }));
    const costAlerts = (settings.billing as { cost_alerts?: unknown }).cost_alerts;
    if (Array.isArray(costAlerts)) {
      costAlerts.forEach((entry: { threshold?: unknown; period?: unknown; enabled?: unknown }, index) => {
        if (typeof entry?.threshold !== 'number' || !ALERT_PERIODS.includes(entry.period as AlertPeriod))
          return;
        const period = entry.period as AlertPeriod;
        rules.push({
          // Keyed by content, not position: reordering the list does not re-trigger an alert.
          id: `settings.cost_alerts.${index}`,
          ruleKey: `settings:${period}:${entry.threshold}`,
          alertId: null,
          source: 'settings',
          name: `Billing cost alert: ${entry.threshold} USD ${period}`,
          type: 'cost',
          threshold: entry.threshold,
          period,
          enabled: entry.enabled !== false,
        });
      });
    }
    const zone = await this.deps.reports.timeZoneOf(accountId);
    return { rules, settings, zone };
  }

  /** Each rule's value over its current period (one load for the longest period). */
  private async currentValues(accountId: string, rules: Rule[], zone: string, now: Date): Promise<number[]> {
    if (rules.length === 0) return [];
    const starts = rules.map((r) => startOf(UNIT[r.period], now, zone));
    const earliest = new Date(Math.min(...starts.map((s) => s.getTime())));
    const items = await this.deps.records.load(accountId, earliest, now, now);
    return rules.map((rule, i) => {
      const totals = totalsOf(items, starts[i]!, now);
      return rule.type === 'cost' ? totals.cost : totals.computeHours;
    });
  }

  private async notify(
    accountId: string,
    settings: Record<string, unknown>,
    rule: Rule,
    value: number,
    periodStart: Date,
  ): Promise<ChannelResult[]> {
    const channels = channelsOf(
      settings['notifications'] as Record<string, Record<string, unknown>>,
      this.deps.notifier.emailConfigured,
    );
    const unit = rule.type === 'cost' ? 'USD' : 'compute hours';
    const text =
      `Anvil usage alert "${rule.name}": ${round(value, 2)} ${unit} this ${UNIT[rule.period]} ` +
      `(since ${periodStart.toISOString()}) reached the threshold of ${rule.threshold} ${unit}.`;
    const results: ChannelResult[] = [];
    const attempt = async (channel: ChannelResult['channel'], send: () => Promise<string | undefined>) => {
      const at = this.deps.clock.now().toISOString();
      try {
        const deliveryId = await send();
        results.push({ channel, status: 'sent', at, ...(deliveryId ? { deliveryId } : {}) });
      } catch (error) {
        results.push({ channel, status: 'failed', at, error: (error as Error).message });
        this.deps.logger.warn({ err: error, accountId, channel }, 'usage alert notification failed');
      }
    };
    if (channels.webhook) {
      const { url, secret } = channels.webhook;
      await attempt('webhook', async () => {
        const result = await this.deps.notifier.webhook(url, secret, {
          type: COST_THRESHOLD_EVENT,
          accountId,
          data: {
            alert_id: rule.id,
            alert_name: rule.name,
            source: rule.source,
            type: rule.type,
            period: rule.period,
            period_start: periodStart.toISOString(),
            threshold: rule.threshold,
            value: round(value),
            unit,
          },
        });
        return result.id;
      });
    }
    if (channels.slack) {
      const { url, channel } = channels.slack;
      await attempt('slack', async () => {
        await this.deps.notifier.chat(url, { text: `:warning: ${text}`, channel });
        return undefined;
      });
    }
    if (channels.email) {
      const to = channels.email;
      await attempt('email', async () => {
        const sent = await this.deps.notifier.email({
          to,
          subject: `Anvil usage alert: ${rule.name}`,
          text,
        });
        return sent.messageId;
      });
    }
    return results;
  }
}

/** The channels a cost alert goes to, from the notification settings. */
function channelsOf(notifications: Record<string, Record<string, unknown>>, emailConfigured: boolean) {
  const webhook = notifications['webhook'] ?? {};
  const slack = notifications['slack'] ?? {};
  const email = notifications['email'] ?? {};
  const events = Array.isArray(webhook['events']) ? (webhook['events'] as string[]) : [];
  const slackAlerts = (slack['alerts'] ?? {}) as Record<string, unknown>;
  const emailAlerts = (email['alerts'] ?? {}) as Record<string, unknown>;
  return {
    webhook:
      webhook['enabled'] === true &&
      typeof webhook['url'] === 'string' &&
      events.includes(COST_THRESHOLD_EVENT)
        ? { url: webhook['url'], secret: typeof webhook['secret'] === 'string' ? webhook['secret'] : null }
        : null,
    slack:
      slack['enabled'] === true &&
      slackAlerts['cost_thresholds'] !== false &&
      typeof slack['webhook_url'] === 'string'
        ? {
            url: slack['webhook_url'],
            channel: typeof slack['channel'] === 'string' ? slack['channel'] : null,
          }
        : null,
    email:
      email['enabled'] === true &&
      emailAlerts['cost_alerts'] !== false &&
      emailConfigured &&
      typeof email['email'] === 'string'
        ? email['email']
        : null,
  };
}

function ruleView(row: UsageAlert) {
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    threshold: row.threshold,
    period: row.period,
    enabled: row.enabled,
    createdBy: row.createdById,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

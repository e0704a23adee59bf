import { ApiError } from '@anvil/shared';
import type { AccessControl, Actor } from '../accounts/access.ts';
import type { SettingsService } from '../accounts/settings.ts';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { GpuHistory, GpuStats } from './gpu-history.ts';
import {
  buckets,
  checkPeriod,
  DETAILED_PERIODS,
  isTimeZone,
  type Unit,
  USAGE_PERIODS,
  type Window,
  windowOf,
} from './periods.ts';
import { type ResourceInfo, shareIn, type UsageItem, type UsageRecords } from './records.ts';

/**
 * Usage and cost reports (account spec: Usage reports), computed from usage records and open cluster and
 * endpoint worker sessions only; GPU utilisation from the telemetry store's samples (gpu-history.ts). An item spanning a window or bucket edge counts pro rata to its time inside; an item
 * without duration (an execution, a transfer) counts where it ends. Amounts are USD.
 */

const DAY = 86_400_000;
const HOUR = 3_600_000;

const later = (a: Date, b: Date) => (a.getTime() >= b.getTime() ? a : b);
const earlier = (a: Date, b: Date) => (a.getTime() <= b.getTime() ? a : b);

export const round = (value: number, digits = 4) => {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
};
const nullableRound = (value: number | null | undefined, digits: number) =>
  value === null || value === undefined ? null : round(value, digits);
const pct = (part: number, whole: number) => (whole > 0 ? round((100 * part) / whole, 2) : 0);
const change = (current: number, previous: number) =>
  previous > 0 ? round((100 * (current - previous)) / previous, 2) : null;

export interface Totals {
  cost: number;
  computeCost: number;
  computeHours: number;
  gpuHours: number;
  storageCost: number;
  storageGbHours: number;
  transferCost: number;
  transferGb: number;
  executions: number;
  executionCost: number;
  otherCost: number;
}

export function totalsOf(items: UsageItem[], from: Date, to: Date): Totals {
  const t: Totals = {
    cost: 0,
    computeCost: 0,
    computeHours: 0,
    gpuHours: 0,
    storageCost: 0,
    storageGbHours: 0,
    transferCost: 0,
    transferGb: 0,
    executions: 0,
    executionCost: 0,
    otherCost: 0,
  };
  for (const item of items) {
    const share = shareIn(item, from, to, true);
    if (share === 0) continue;
    const cost = item.cost * share;
    t.cost += cost;
    switch (item.kind) {
      case 'gpu_compute':
        t.computeCost += cost;
        t.computeHours += item.quantity * share;
        t.gpuHours += item.gpuHours * share;
        break;
      case 'storage':
        t.storageCost += cost;
        t.storageGbHours += item.quantity * share;
        break;
      case 'transfer':
        t.transferCost += cost;
        t.transferGb += item.quantity * share;
        break;
      case 'execution':
        t.executions += item.quantity * share;
        t.executionCost += cost;
        t.otherCost += cost;
        break;
      default:
        t.otherCost += cost;
    }
  }
  return t;
}

export const SERVICE_OF: Record<string, string> = {
  gpu_compute: 'compute',
  storage: 'storage',
  transfer: 'data_transfer',
  execution: 'endpoints',
};

export const COST_BREAKDOWNS = ['service', 'resource', 'region', 'team'] as const;
export type CostBreakdown = (typeof COST_BREAKDOWNS)[number];
export const GRANULARITIES = ['hour', 'day', 'week'] as const;
export const DETAIL_RESOURCES = ['gpu', 'storage', 'transfer'] as const;

export class UsageReports {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      access: AccessControl;
      settings: SettingsService;
      records: UsageRecords;
      history: GpuHistory;
    },
  ) {}

  /** Billing data: read on the billing scope for the member and the billing scope on the key. */
  async requireBilling(actor: Actor, permission: 'read' | 'manage_billing' = 'read') {
    return this.deps.access.require(actor, {
      permission,
      scope: 'billing',
      keyScope: 'billing',
      action: permission === 'read' ? 'usage_read_attempt' : 'usage_alerts_change_attempt',
    });
  }

  /** The time zone given, else the account's billing time zone. */
  async timeZoneOf(accountId: string, given?: string): Promise<string> {
    if (given !== undefined) {
      if (!isTimeZone(given)) {
        throw new ApiError('VALIDATION_ERROR', `"${given}" is not an IANA time zone`, {
          field: 'timezone',
          reason: 'must be an IANA time zone such as Europe/Berlin',
        });
      }
      return given;
    }
    const settings = await this.deps.settings.effective(accountId);
    const zone = (settings.billing as { timezone?: unknown }).timezone;
    return typeof zone === 'string' && isTimeZone(zone) ? zone : 'UTC';
  }

  private async prepare(actor: Actor, period: string, allowed: string[], timezone?: string) {
    const member = await this.requireBilling(actor);
    checkPeriod(period, allowed);
    const zone = await this.timeZoneOf(member.accountId, timezone);
    const now = this.deps.clock.now();
    const window = windowOf(period, now, zone);
    return { accountId: member.accountId, zone, now, window };
  }

  async summary(actor: Actor, query: { period?: string | undefined; timezone?: string | undefined }) {
    const { accountId, zone, now, window } = await this.prepare(
      actor,
      query.period ?? 'month',
      USAGE_PERIODS,
      query.timezone,
    );
    const items = await this.deps.records.load(accountId, window.previous.start, window.end, now);
    const current = totalsOf(items, window.start, window.end);
    const previous = totalsOf(items, window.previous.start, window.previous.end);
    const spanMs = window.end.getTime() - window.start.getTime();
    const resources = await this.deps.records.resources(accountId, items);
    return {
      period: window.period,
      periodStart: window.start.toISOString(),
      periodEnd: window.end.toISOString(),
      timezone: zone,
      currency: 'USD',
      summary: {
        totalCost: round(current.cost),
        totalComputeHours: round(current.computeHours),
        totalEndpointExecutions: round(current.executions, 0),
        totalDataTransfer: round(current.transferGb),
        averageDailyCost: round(current.cost / Math.max(1, spanMs / DAY)),
        costTrend: change(current.cost, previous.cost),
      },
      breakdown: {
        compute: {
          cost: round(current.computeCost),
          hours: round(current.computeHours),
          percentage: pct(current.computeCost, current.cost),
        },
        storage: {
          cost: round(current.storageCost),
          gb: round(current.storageGbHours / Math.max(1, spanMs / HOUR)),
          percentage: pct(current.storageCost, current.cost),
        },
        dataTransfer: {
          cost: round(current.transferCost),
          gb: round(current.transferGb),
          percentage: pct(current.transferCost, current.cost),
        },
        other: { cost: round(current.otherCost), percentage: pct(current.otherCost, current.cost) },
      },
      topResources: topResources(items, window, resources, current.cost),
    };
  }

  /** The spec's short form of the summary: period, computeMinutes, storageGB, apiCalls, totalCost. */
  async summaryShort(actor: Actor, query: { period?: string | undefined; timezone?: string | undefined }) {
    const full = await this.summary(actor, query);
    const member = await this.deps.access.caller(actor);
    const apiCalls = await this.deps.records.apiCalls(
      member.accountId,
      new Date(full.periodStart),
      new Date(full.periodEnd),
    );
    return {
      period: full.period,
      computeMinutes: round(full.breakdown.compute.hours * 60, 2),
      storageGB: full.breakdown.storage.gb,
      apiCalls,
      totalCost: full.summary.totalCost,
    };
  }

  async detailed(
    actor: Actor,
    query: {
      period?: string | undefined;
      granularity?: (typeof GRANULARITIES)[number] | undefined;
      resources?: (typeof DETAIL_RESOURCES)[number][] | undefined;
    },
  ) {
    const { accountId, zone, now, window } = await this.prepare(
      actor,
      query.period ?? '30d',
      DETAILED_PERIODS,
    );
    const granularity = query.granularity ?? 'day';
    const wanted = new Set(query.resources?.length ? query.resources : DETAIL_RESOURCES);
    const items = await this.deps.records.load(accountId, window.start, window.end, now);
    const timeline = buckets(granularity as Unit, window.start, window.end, zone).map((bucket) => {
      // The first bucket is clipped to the window start; the last one ends now.
      const from = later(bucket.start, window.start);
      const to = earlier(bucket.end, window.end);
      const t = totalsOf(
        items.filter((i) => shareIn(i, from, to, to === window.end) > 0),
        from,
        to,
      );
      const resources: Record<string, unknown> = {};
      if (wanted.has('gpu')) {
        const gpu: Record<string, { hours: number; cost: number }> = {};
        for (const item of items) {
          if (item.kind !== 'gpu_compute') continue;
          const share = shareIn(item, from, to, to === window.end);
          if (share === 0) continue;
          const key = item.gpuType ?? 'unknown';
          const entry = gpu[key] ?? { hours: 0, cost: 0 };
          gpu[key] = entry;
          entry.hours += item.gpuHours * share;
          entry.cost += item.cost * share;
        }
        for (const entry of Object.values(gpu)) {
          entry.hours = round(entry.hours);
          entry.cost = round(entry.cost);
        }
        resources['gpu'] = gpu;
      }
      if (wanted.has('storage')) {
        resources['storage'] = { gbHours: round(t.storageGbHours), cost: round(t.storageCost) };
      }
      if (wanted.has('transfer')) {
        resources['transfer'] = { gb: round(t.transferGb), cost: round(t.transferCost) };
      }
      return {
        date: bucket.start.toISOString(),
        cost: round(t.cost),
        computeHours: round(t.computeHours),
        executions: round(t.executions, 0),
        dataTransfer: round(t.transferGb),
        resources,
      };
    });
    const total = totalsOf(items, window.start, window.end).cost;
    const days = Math.max(1, (window.end.getTime() - window.start.getTime()) / DAY);
    const dailyAverage = total / days;
    const daily = buckets('day', window.start, window.end, zone).map(
      (b) => totalsOf(items, later(b.start, window.start), b.end).cost,
    );
    return {
      period: window.period,
      periodStart: window.start.toISOString(),
      periodEnd: window.end.toISOString(),
      granularity,
      timezone: zone,
      currency: 'USD',
      timeline,
      projections: {
        monthlyEstimate: round(dailyAverage * 30),
        dailyAverage: round(dailyAverage),
        confidence: confidenceOf(daily),
      },
    };
  }

  async gpu(actor: Actor, query: { period?: string | undefined; includeMetrics?: boolean | undefined }) {
    const { accountId, zone, now, window } = await this.prepare(actor, query.period ?? '30d', USAGE_PERIODS);
    const items = (await this.deps.records.load(accountId, window.start, window.end, now)).filter(
      (i) => i.kind === 'gpu_compute' && shareIn(i, window.start, window.end, true) > 0,
    );
    const byType = new Map<string, UsageItem[]>();
    for (const item of items) {
      const key = item.gpuType ?? 'unknown';
      byType.set(key, [...(byType.get(key) ?? []), item]);
    }
    const days = buckets('day', window.start, window.end, zone);
    const history = query.includeMetrics
      ? await this.deps.history.of(
          accountId,
          items,
          window.start,
          window.end,
          days.map((d) => d.start),
        )
      : null;
    const metrics = history?.byType ?? new Map<string, GpuStats>();
    const gpuUsage = [...byType.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([gpuType, list]) => {
        const t = totalsOf(list, window.start, window.end);
        const durations = list.map((i) => (i.endedAt.getTime() - i.startedAt.getTime()) / HOUR);
        return {
          gpuType,
          totalHours: round(t.gpuHours),
          totalCost: round(t.cost),
          averageUtilization: nullableRound(metrics.get(gpuType)?.avgUtil, 2),
          peakUtilization: nullableRound(metrics.get(gpuType)?.peakUtil, 2),
          sessions: list.length,
          averageSessionDuration: round(durations.reduce((a, b) => a + b, 0) / list.length),
          performance: {
            averageMemoryUsage: nullableRound(metrics.get(gpuType)?.avgMemory, 2),
            averageTemperature: nullableRound(metrics.get(gpuType)?.avgTemp, 2),
            efficiency: null,
          },
          usage: days.map((day) => {
            const from = later(day.start, window.start);
            const inDay = list.filter((i) => shareIn(i, from, day.end, true) > 0);
            const d = totalsOf(inDay, from, day.end);
            return {
              date: day.start.toISOString(),
              hours: round(d.gpuHours),
              cost: round(d.cost),
              utilization: nullableRound(history?.dailyUtil.get(gpuType)?.get(day.start.getTime()), 2),
              sessions: inDay.length,
            };
          }),
        };
      });
    return {
      period: window.period,
      periodStart: window.start.toISOString(),
      periodEnd: window.end.toISOString(),
      timezone: zone,
      includeMetrics: query.includeMetrics ?? false,
      gpuUsage,
    };
  }

  async endpoints(actor: Actor, query: { period?: string | undefined }) {
    const { accountId, zone, now, window } = await this.prepare(actor, query.period ?? '30d', USAGE_PERIODS);
    const items = (await this.deps.records.load(accountId, window.start, window.end, now)).filter(
      (i) => i.resourceType === 'endpoint' && shareIn(i, window.start, window.end, true) > 0,
    );
    const resources = await this.deps.records.resources(accountId, items);
    const byEndpoint = new Map<string, UsageItem[]>();
    for (const item of items)
      byEndpoint.set(item.resourceId, [...(byEndpoint.get(item.resourceId) ?? []), item]);
    const days = buckets('day', window.start, window.end, zone);
    const endpointUsage = [...byEndpoint.entries()].map(([endpointId, list]) => {
      const t = totalsOf(list, window.start, window.end);
      const durations = list
        .map((i) => i.metadata?.['durationMs'])
        .filter((v): v is number => typeof v === 'number');
      const outcomes = list
        .map((i) => i.metadata?.['success'])
        .filter((v): v is boolean => typeof v === 'boolean');
      const users = new Map<string, number>();
      for (const item of list) {
        if (item.kind !== 'execution' || !item.userId) continue;
        users.set(item.userId, (users.get(item.userId) ?? 0) + item.quantity);
      }
      return {
        endpointId,
        name: resources.get(endpointId)?.name ?? endpointId,
        executions: round(t.executions, 0),
        computeHours: round(t.gpuHours),
        cost: round(t.cost),
        averageExecutionTime: durations.length
          ? round(durations.reduce((a, b) => a + b, 0) / durations.length, 2)
          : null,
        successRate: outcomes.length ? pct(outcomes.filter(Boolean).length, outcomes.length) : null,
        usage: days.map((day) => {
          const d = totalsOf(list, later(day.start, window.start), day.end);
          return { date: day.start.toISOString(), executions: round(d.executions, 0), cost: round(d.cost) };
        }),
        topUsers: [...users.entries()]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 10)
          .map(([userId, executions]) => ({ userId, executions, percentage: pct(executions, t.executions) })),
      };
    });
    endpointUsage.sort((a, b) => b.executions - a.executions || a.endpointId.localeCompare(b.endpointId));
    const totalExecutions = endpointUsage.reduce((a, e) => a + e.executions, 0);
    const totalCost = round(endpointUsage.reduce((a, e) => a + e.cost, 0));
    return {
      period: window.period,
      periodStart: window.start.toISOString(),
      periodEnd: window.end.toISOString(),
      endpointUsage,
      summary: {
        totalExecutions,
        totalCost,
        averageExecutionCost: totalExecutions > 0 ? round(totalCost / totalExecutions, 6) : null,
        mostUsedEndpoint: endpointUsage[0]?.endpointId ?? null,
      },
    };
  }

  async costs(
    actor: Actor,
    query: {
      period?: string | undefined;
      breakdown?: CostBreakdown | undefined;
      currency?: string | undefined;
    },
  ) {
    const { accountId, now, window } = await this.prepare(actor, query.period ?? '30d', USAGE_PERIODS);
    const currency = query.currency ?? 'USD';
    if (currency !== 'USD') {
      throw new ApiError(
        'VALIDATION_ERROR',
        'usage is recorded in USD and no exchange rates are configured',
        {
          field: 'currency',
          reason: 'only USD is available',
          received: currency,
        },
      );
    }
    const breakdown = query.breakdown ?? 'service';
    const monthAgo = new Date(now.getTime() - 60 * DAY);
    const from = window.start < monthAgo ? window.start : monthAgo;
    const all = await this.deps.records.load(accountId, from, window.end, now);
    const items = all.filter((i) => shareIn(i, window.start, window.end, true) > 0);
    const resources = await this.deps.records.resources(accountId, items);
    const names = await this.memberNames(accountId, items, resources);
    const total = totalsOf(items, window.start, window.end).cost;
    const groups = new Map<string, { items: UsageItem[]; details: Record<string, unknown> }>();
    for (const item of items) {
      const info = resources.get(item.resourceId);
      let key: string;
      let details: Record<string, unknown>;
      switch (breakdown) {
        case 'service':
          key = SERVICE_OF[item.kind] ?? 'other';
          details = { kind: item.kind };
          break;
        case 'resource':
          key = item.resourceId;
          details = {
            resourceType: item.resourceType,
            resourceId: item.resourceId,
            name: info?.name ?? null,
          };
          break;
        case 'region':
          key = info?.region ?? 'unassigned';
          details = { region: info?.region ?? null };
          break;
        case 'team': {
          const userId = item.userId ?? info?.ownerId ?? null;
          key = userId ?? 'unattributed';
          details = { userId, name: userId ? (names.get(userId) ?? null) : null };
          break;
        }
      }
      const group = groups.get(key) ?? { items: [], details };
      group.items.push(item);
      groups.set(key, group);
    }
    const services = [...groups.entries()]
      .map(([service, group]) => {
        const t = totalsOf(group.items, window.start, window.end);
        return {
          service,
          cost: round(t.cost),
          percentage: pct(t.cost, total),
          details: {
            ...group.details,
            records: group.items.length,
            computeHours: round(t.computeHours),
            gpuHours: round(t.gpuHours),
          },
        };
      })
      .sort((a, b) => b.cost - a.cost || a.service.localeCompare(b.service));
    const span = (days: number, back: number) =>
      totalsOf(all, new Date(now.getTime() - (days + back) * DAY), new Date(now.getTime() - back * DAY)).cost;
    return {
      period: window.period,
      periodStart: window.start.toISOString(),
      periodEnd: window.end.toISOString(),
      currency,
      breakdown,
      totalCost: round(total),
      services,
      trends: {
        weekOverWeek: change(span(7, 0), span(7, 7)),
        monthOverMonth: change(span(30, 0), span(30, 30)),
      },
    };
  }

  private async memberNames(accountId: string, items: UsageItem[], resources: Map<string, ResourceInfo>) {
    const ids = new Set<string>();
    for (const item of items) {
      const id = item.userId ?? resources.get(item.resourceId)?.ownerId;
      if (id) ids.add(id);
    }
    if (ids.size === 0) return new Map<string, string | null>();
    const users = await this.deps.db.prisma.user.findMany({
      where: { accountId, id: { in: [...ids] } },
      select: { id: true, name: true, email: true },
    });
    return new Map(users.map((u) => [u.id, u.name ?? u.email]));
  }
}

function topResources(
  items: UsageItem[],
  window: Window,
  resources: Map<string, ResourceInfo>,
  total: number,
) {
  const by = new Map<string, UsageItem[]>();
  for (const item of items) by.set(item.resourceId, [...(by.get(item.resourceId) ?? []), item]);
  return [...by.entries()]
    .map(([id, list]) => {
      const t = totalsOf(list, window.start, window.end);
      return {
        id,
        type: list[0]!.resourceType,
        name: resources.get(id)?.name ?? id,
        cost: round(t.cost),
        hours: round(t.computeHours),
        percentage: pct(t.cost, total),
      };
    })
    .filter((r) => r.cost > 0 || r.hours > 0)
    .sort((a, b) => b.cost - a.cost || b.hours - a.hours || a.id.localeCompare(b.id))
    .slice(0, 10);
}

/** 1 − coefficient of variation of the daily costs, clamped to [0, 1]; null when nothing was spent. */
export function confidenceOf(daily: number[]): number | null {
  if (daily.length === 0) return null;
  const mean = daily.reduce((a, b) => a + b, 0) / daily.length;
  if (mean <= 0) return null;
  const variance = daily.reduce((a, b) => a + (b - mean) ** 2, 0) / daily.length;
  return round(Math.max(0, Math.min(1, 1 - Math.sqrt(variance) / mean)), 2);
}

import { Type } from '@sinclair/typebox';
import { StringEnum } from '../../accounts/settings-schema.ts';
import { ALERT_PERIODS, ALERT_TYPES } from '../../usage/alerts.ts';
import { COST_BREAKDOWNS, DETAIL_RESOURCES, GRANULARITIES } from '../../usage/reports.ts';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Union([schema, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });
const Num = Type.Number();
const Period = Type.String({
  maxLength: 16,
  description: 'Checked against the list of this report (400 INVALID_PERIOD with validPeriods otherwise)',
});

export const SummaryQuery = Type.Object(
  {
    period: Type.Optional(Period),
    timezone: Type.Optional(
      Type.String({ maxLength: 64, description: 'IANA zone; default: the billing time zone' }),
    ),
    format: Type.Optional(
      StringEnum(
        ['full', 'short'] as const,
        'short: the spec’s short form (period, computeMinutes, storageGB, apiCalls, totalCost)',
      ),
    ),
  },
  { additionalProperties: false },
);

export const DetailedQuery = Type.Object(
  {
    period: Type.Optional(Period),
    granularity: Type.Optional(StringEnum(GRANULARITIES)),
    resources: Type.Optional(
      Type.Array(StringEnum(DETAIL_RESOURCES), {
        description: 'Which resources[] entries each timeline point carries; repeat or omit for all',
      }),
    ),
  },
  { additionalProperties: false },
);

export const GpuQuery = Type.Object(
  { period: Type.Optional(Period), includeMetrics: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);

export const EndpointsQuery = Type.Object({ period: Type.Optional(Period) }, { additionalProperties: false });

export const CostsQuery = Type.Object(
  {
    period: Type.Optional(Period),
    breakdown: Type.Optional(StringEnum(COST_BREAKDOWNS)),
    currency: Type.Optional(StringEnum(['USD', 'EUR', 'GBP', 'JPY'] as const)),
  },
  { additionalProperties: false },
);

const CostShare = Type.Object({ cost: Num, percentage: Num });

export const Summary = Type.Object({
  period: Type.String(),
  periodStart: DateTime,
  periodEnd: DateTime,
  timezone: Type.String(),
  currency: Type.String(),
  summary: Type.Object({
    totalCost: Num,
    totalComputeHours: Num,
    totalEndpointExecutions: Num,
    totalDataTransfer: Type.Number({ description: 'GB' }),
    averageDailyCost: Num,
    costTrend: Nullable(Num),
  }),
  breakdown: Type.Object({
    compute: Type.Object({ cost: Num, hours: Num, percentage: Num }),
    storage: Type.Object({ cost: Num, gb: Num, percentage: Num }),
    dataTransfer: Type.Object({ cost: Num, gb: Num, percentage: Num }),
    other: CostShare,
  }),
  topResources: Type.Array(
    Type.Object({
      id: Type.String(),
      type: Type.String(),
      name: Type.String(),
      cost: Num,
      hours: Num,
      percentage: Num,
    }),
  ),
});

export const ShortSummary = Type.Object({
  period: Type.String(),
  computeMinutes: Num,
  storageGB: Num,
  apiCalls: Type.Integer(),
  totalCost: Num,
});

export const Detailed = Type.Object({
  period: Type.String(),
  periodStart: DateTime,
  periodEnd: DateTime,
  granularity: Type.String(),
  timezone: Type.String(),
  currency: Type.String(),
  timeline: Type.Array(
    Type.Object({
      date: DateTime,
      cost: Num,
      computeHours: Num,
      executions: Num,
      dataTransfer: Num,
      resources: Type.Object(
        {
          gpu: Type.Optional(Type.Record(Type.String(), Type.Object({ hours: Num, cost: Num }))),
          storage: Type.Optional(Type.Object({ gbHours: Num, cost: Num })),
          transfer: Type.Optional(Type.Object({ gb: Num, cost: Num })),
        },
        { additionalProperties: false },
      ),
    }),
  ),
  projections: Type.Object({ monthlyEstimate: Num, dailyAverage: Num, confidence: Nullable(Num) }),
});

export const GpuReport = Type.Object({
  period: Type.String(),
  periodStart: DateTime,
  periodEnd: DateTime,
  timezone: Type.String(),
  includeMetrics: Type.Boolean(),
  gpuUsage: Type.Array(
    Type.Object({
      gpuType: Type.String(),
      totalHours: Num,
      totalCost: Num,
      averageUtilization: Nullable(Num),
      peakUtilization: Nullable(Num),
      sessions: Type.Integer(),
      averageSessionDuration: Num,
      performance: Type.Object({
        averageMemoryUsage: Nullable(Num),
        averageTemperature: Nullable(Num),
        efficiency: Nullable(Num),
      }),
      usage: Type.Array(
        Type.Object({
          date: DateTime,
          hours: Num,
          cost: Num,
          utilization: Nullable(Num),
          sessions: Type.Integer(),
        }),
      ),
    }),
  ),
});

export const EndpointsReport = Type.Object({
  period: Type.String(),
  periodStart: DateTime,
  periodEnd: DateTime,
  endpointUsage: Type.Array(
    Type.Object({
      endpointId: Type.String(),
      name: Type.String(),
      executions: Num,
      computeHours: Num,
      cost: Num,
      averageExecutionTime: Nullable(Num),
      successRate: Nullable(Num),
      usage: Type.Array(Type.Object({ date: DateTime, executions: Num, cost: Num })),
      topUsers: Type.Array(Type.Object({ userId: Type.String(), executions: Num, percentage: Num })),
    }),
  ),
  summary: Type.Object({
    totalExecutions: Num,
    totalCost: Num,
    averageExecutionCost: Nullable(Num),
    mostUsedEndpoint: Nullable(Type.String()),
  }),
});

export const CostsReport = Type.Object({
  period: Type.String(),
  periodStart: DateTime,
  periodEnd: DateTime,
  currency: Type.String(),
  breakdown: Type.String({ description: 'The dimension services[] is grouped by' }),
  totalCost: Num,
  services: Type.Array(
    Type.Object({
      service: Type.String(),
      cost: Num,
      percentage: Num,
      details: Type.Object({}, { additionalProperties: true }),
    }),
  ),
  trends: Type.Object({ weekOverWeek: Nullable(Num), monthOverMonth: Nullable(Num) }),
});

const ChannelResult = Type.Object({
  channel: Type.String(),
  status: Type.String(),
  at: DateTime,
  error: Type.Optional(Type.String()),
  deliveryId: Type.Optional(Type.String()),
});

export const AlertsStatus = Type.Object({
  alerts: Type.Array(
    Type.Object({
      id: Type.String({
        description: 'alert_<id> for rules; settings.cost_alerts.<index> for billing cost alerts',
      }),
      name: Type.String(),
      type: Type.String({ description: 'cost (USD) or compute_hours' }),
      threshold: Num,
      current: Type.Number({ description: 'Value over the current period so far' }),
      percentage: Type.Number({ description: '100 × current / threshold' }),
      status: Type.String({ description: 'ok, triggered (this period), disabled' }),
      triggeredAt: Nullable(DateTime),
      notificationsSent: Type.Integer({ description: 'Channels that accepted this period’s notification' }),
      period: Type.String(),
      periodStart: DateTime,
      source: Type.String({ description: 'rule or settings' }),
      enabled: Type.Boolean(),
      notifications: Type.Array(ChannelResult),
    }),
  ),
  settings: Type.Object({
    emailNotifications: Type.Boolean(),
    slackNotifications: Type.Boolean(),
    webhookUrl: Nullable(Type.String()),
  }),
});

export const CreateAlertBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100, pattern: '\\S' }),
    type: Type.Optional(StringEnum(ALERT_TYPES)),
    threshold: Type.Number({ exclusiveMinimum: 0, maximum: 1e9 }),
    period: Type.Optional(StringEnum(ALERT_PERIODS)),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

export const AlertRule = Type.Object({
  id: Type.String(),
  name: Type.String(),
  type: Type.String(),
  threshold: Num,
  period: Type.String(),
  enabled: Type.Boolean(),
  createdBy: Nullable(Type.String()),
  createdAt: DateTime,
  updatedAt: DateTime,
});

export const AlertParams = Type.Object(
  { alert_id: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);

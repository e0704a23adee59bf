import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { DETAILED_PERIODS, USAGE_PERIODS } from '../../usage/periods.ts';
import { actorOf } from '../accounts/common.ts';
import {
  AlertParams,
  AlertRule,
  AlertsStatus,
  CostsQuery,
  CostsReport,
  CreateAlertBody,
  Detailed,
  DetailedQuery,
  EndpointsQuery,
  EndpointsReport,
  GpuQuery,
  GpuReport,
  ShortSummary,
  Summary,
  SummaryQuery,
} from './usage.schemas.ts';

const tags = ['usage'];

const ACCESS =
  'Billing data: the member needs read on the billing scope (owner, admin) and the API key the billing ' +
  'scope, else 403 INSUFFICIENT_PERMISSIONS with details.requiredScope. Only the caller’s account is counted.';

const SOURCES =
  'Computed from usage_records (closed cluster and endpoint worker sessions, endpoint executions, storage, ' +
  'transfer) plus each open cluster session (sessionStartedAt until now × hourlyRate) and each open endpoint ' +
  'worker session (from its container start until now × its hourly rate). A record crossing the window or a bucket ' +
  'edge counts pro rata to its time inside; one without duration counts where it ends. Amounts are USD, ' +
  'rounded to 4 decimals; percentages to 2.';

const PERIODS =
  `period: ${USAGE_PERIODS.join(', ')}. Rolling 1d…1y end now and reach back N×24 h (1y = 365 days); ` +
  'day, week (from Monday) and month run from the start of the current calendar unit in the time zone ' +
  '(query timezone, else the billing time zone) until now. Others: 400 INVALID_PERIOD.';

export const usageRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const { reports, alerts } = context.usage;
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/accounts/usage',
    {
      config,
      schema: {
        tags,
        summary: 'Usage and cost summary',
        description:
          `${PERIODS} Default month. totalComputeHours and breakdown.compute.hours: cluster running hours ` +
          '(GPU hours are in /usage/gpu); breakdown.storage.gb: GB-hours stored ÷ hours in the window ' +
          '(datasets, workloads’ measured disks and cluster snapshots kept on hosts, each by its own bytes) ' +
          '(average GB held); other: endpoint executions and any other kind. averageDailyCost = totalCost ÷ ' +
          'max(1, days in the window); costTrend = % change against the previous equal window (previous ' +
          'calendar unit for day/week/month), null when that was 0. topResources: the 10 costliest. ' +
          'format=short answers the short form; apiCalls counts the API requests of the account in the window. ' +
          `${SOURCES} ${ACCESS}`,
        querystring: SummaryQuery,
        response: { 200: Type.Union([Summary, ShortSummary]), ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) =>
      request.query.format === 'short'
        ? reports.summaryShort(actorOf(request), request.query)
        : reports.summary(actorOf(request), request.query),
  );

  app.get(
    '/v2/accounts/usage/detailed',
    {
      config,
      schema: {
        tags,
        summary: 'Usage timeline',
        description:
          `period: ${DETAILED_PERIODS.join(', ')} (default 30d), rolling; granularity hour, day (default) or ` +
          'week, buckets aligned to the billing time zone (the first clipped to the window start). ' +
          'resources picks the per-bucket entries: gpu (GPU hours and cost by GPU type), storage (GB-hours), ' +
          'transfer (GB). projections: dailyAverage = cost ÷ days in the window, monthlyEstimate = dailyAverage ' +
          '× 30, confidence = 1 − coefficient of variation of the daily costs (clamped 0…1; null without ' +
          `cost). ${SOURCES} ${ACCESS}`,
        querystring: DetailedQuery,
        response: { 200: Detailed, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => reports.detailed(actorOf(request), request.query),
  );

  app.get(
    '/v2/accounts/usage/gpu',
    {
      config,
      schema: {
        tags,
        summary: 'GPU usage by GPU type',
        description:
          `${PERIODS} Default 30d. totalHours: GPU hours (cluster hours × GPU count) in the window; sessions: ` +
          'billing sessions touching it (open ones included); averageSessionDuration: their mean full length ' +
          'in hours; cluster and endpoint worker sessions both count. With includeMetrics=true, ' +
          'averageUtilization, peakUtilization, performance.averageMemoryUsage (% of GPU memory), ' +
          'averageTemperature (°C) and each day’s usage[].utilization are sample-weighted from the stored GPU ' +
          'samples of exactly the GPUs each session held (closed sessions name them in their record, open ones ' +
          'hold them now), over the part of the session in the window: one-minute rollups, and raw samples for ' +
          'minutes not rolled up yet. Null where no sample exists (rollups are kept 30 days; sessions recorded ' +
          'before GPUs were named have none). efficiency is always null (no definition in the spec). ' +
          `${SOURCES} ${ACCESS}`,
        querystring: GpuQuery,
        response: { 200: GpuReport, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => reports.gpu(actorOf(request), request.query),
  );

  app.get(
    '/v2/accounts/usage/endpoints',
    {
      config,
      schema: {
        tags,
        summary: 'Serverless endpoint usage',
        description:
          `${PERIODS} Default 30d. From usage records of resource type endpoint. Workers bill their uptime, as ` +
          'RunPod bills active workers: from when a worker’s container runs until the worker is removed, at the ' +
          'GPU price × gpuCount fixed when it was placed (kind gpu_compute: computeHours are its GPU hours, open ' +
          'workers counted up to now). Executions (kind execution) are counted with cost 0, their GPU time being ' +
          'part of that uptime; averageExecutionTime from metadata.durationMs and successRate from ' +
          'metadata.success when recorded, else null. Empty while no endpoint has had a running worker. ' +
          `${SOURCES} ${ACCESS}`,
        querystring: EndpointsQuery,
        response: { 200: EndpointsReport, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => reports.endpoints(actorOf(request), request.query),
  );

  app.get(
    '/v2/accounts/usage/costs',
    {
      config,
      schema: {
        tags,
        summary: 'Costs grouped by service, resource, region or team member',
        description:
          `${PERIODS} Default 30d. breakdown (default service): service = compute, storage, data_transfer, ` +
          'endpoints, other; resource = resource id; region = the cluster region (unassigned without one); ' +
          'team = the member the usage is recorded for (the cluster owner when the record names none). ' +
          'currency: only USD (records are in USD; no exchange rates): others 400 VALIDATION_ERROR. trends: ' +
          '% change of the last 7 (30) days against the 7 (30) before, null when those were 0. ' +
          `${SOURCES} ${ACCESS}`,
        querystring: CostsQuery,
        response: { 200: CostsReport, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => reports.costs(actorOf(request), request.query),
  );

  const ALERTS =
    'Rules watch the current calendar period (daily, weekly from Monday, monthly) in the billing time zone: ' +
    'cost = USD spent, compute_hours = running hours of GPU sessions (clusters, training jobs, endpoint ' +
    'workers). They are evaluated every ' +
    'ANVIL_USAGE_ALERT_SECONDS together with billing.cost_alerts from the settings; a threshold reached is ' +
    'recorded once per rule and period and notified once: webhook event cost.threshold_exceeded (webhook ' +
    'enabled and subscribed to that event; signed X-Anvil-Signature as every settings webhook), chat ' +
    '(slack enabled, alerts.cost_thresholds on), e-mail (email enabled, alerts.cost_alerts on, SMTP configured).';

  app.get(
    '/v2/accounts/usage/alerts',
    {
      config,
      schema: {
        tags,
        summary: 'Usage alerts and where they notify',
        description:
          `Every rule and billing cost alert with its value so far this period. ${ALERTS} settings: the ` +
          `channels a triggered alert reaches now. ${ACCESS}`,
        response: { 200: AlertsStatus, ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => alerts.status(actorOf(request)),
  );

  app.get(
    '/v2/accounts/usage/alerts/rules',
    {
      config,
      schema: {
        tags,
        summary: 'The account’s usage alert rules',
        description: `${ALERTS} ${ACCESS}`,
        response: { 200: Type.Object({ rules: Type.Array(AlertRule) }), ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => alerts.listRules(actorOf(request)),
  );

  app.post(
    '/v2/accounts/usage/alerts/rules',
    {
      config,
      schema: {
        tags,
        summary: 'Create a usage alert rule',
        description:
          `type default cost, period default monthly, threshold > 0. Needs manage_billing (owner, admin) and ` +
          `a key with the billing scope. ${ALERTS}`,
        body: CreateAlertBody,
        response: { 201: AlertRule, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(await alerts.create(actorOf(request), request.body)),
  );

  app.delete(
    '/v2/accounts/usage/alerts/rules/:alert_id',
    {
      config,
      schema: {
        tags,
        summary: 'Delete a usage alert rule',
        description:
          'Its past triggers stay recorded. Another account’s or an unknown id: 404 USAGE_ALERT_NOT_FOUND. ' +
          'Needs manage_billing and a key with the billing scope.',
        params: AlertParams,
        response: {
          200: Type.Object({ id: Type.String(), deleted: Type.Literal(true) }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => alerts.delete(actorOf(request), request.params.alert_id),
  );
};

import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.ts';
import { HOST_EVENT_TYPES } from '../../fleet/hosts/event-log.ts';
import { flatErrors } from '../../http/error-body.ts';
import { HostIdParams } from './admin.schemas.ts';
import {
  HostEventsQuery,
  HostEventsResponse,
  MAX_SERIES_SPAN_MS,
  SeriesQuery,
  SeriesResponse,
} from './host-history.schemas.ts';
import { requireOperator } from './operator.ts';

const HOUR_MS = 3_600_000;
const MAX_KEYS = 64;

/**
 * What a host did over time, for the dashboard's charts and timeline: metric series bucketed and
 * averaged by the database (bounded points, however long the window), and the host's events.
 * Owners and admins of the operators' account only.
 */
export const adminHostHistoryRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { fleet } = context;
  app.addHook('onRequest', requireOperator(context));
  const tags = ['admin'];
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/admin/hosts/:host_id/metrics/series',
    {
      config,
      schema: {
        tags,
        summary: "A host's metrics over a window, downsampled to at most `points` buckets",
        description:
          'Buckets of equal width over [from, to); gauges are averaged, counters answered as per-second rates. ' +
          'Reads raw samples within their 24 h retention, else one-minute rollups (30 days).',
        params: HostIdParams,
        querystring: SeriesQuery,
        response: { 200: SeriesResponse, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const hostId = request.params.host_id;
      await fleet.hosts.get(hostId);
      const q = request.query;
      const to = q.to ? new Date(q.to) : context.clock.now();
      const from = q.from ? new Date(q.from) : new Date(to.getTime() - HOUR_MS);
      const span = to.getTime() - from.getTime();
      if (span <= 0 || span > MAX_SERIES_SPAN_MS) {
        throw new ApiError('VALIDATION_ERROR', 'from must be before to, and at most 30 days before it', {
          field: 'from',
          from: from.toISOString(),
          to: to.toISOString(),
        });
      }
      const keys = q.keys
        ?.split(',')
        .map((k) => k.trim())
        .filter(Boolean);
      if (keys && keys.length > MAX_KEYS) {
        throw new ApiError('VALIDATION_ERROR', `at most ${MAX_KEYS} keys`, {
          field: 'keys',
          count: keys.length,
        });
      }
      const kind = q.kind ?? 'host';
      const answer = await fleet.metricSeries.read({
        hostId,
        kind,
        series: q.series,
        keys,
        from,
        to,
        points: q.points ?? 360,
      });
      return { hostId, kind, ...answer };
    },
  );

  app.get(
    '/v2/admin/hosts/:host_id/events',
    {
      config,
      schema: {
        tags,
        summary: "A host's timeline: joins, connections, unreachability, cordons, GPU health changes",
        params: HostIdParams,
        querystring: HostEventsQuery,
        response: { 200: HostEventsResponse, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const hostId = request.params.host_id;
      await fleet.hosts.get(hostId);
      const types = request.query.type
        ?.split(',')
        .map((t) => t.trim())
        .filter(Boolean);
      const unknown = types?.filter((t) => !(HOST_EVENT_TYPES as readonly string[]).includes(t)) ?? [];
      if (unknown.length > 0) {
        throw new ApiError('VALIDATION_ERROR', `unknown event type ${unknown.join(', ')}`, {
          field: 'type',
          allowed: [...HOST_EVENT_TYPES],
        });
      }
      const limit = request.query.limit ?? 100;
      const events = await fleet.hostEvents.list(hostId, {
        limit,
        before: request.query.before,
        ...(types ? { types } : {}),
      });
      return { hostId, events, nextBefore: events.length === limit ? (events.at(-1)?.id ?? null) : null };
    },
  );
};

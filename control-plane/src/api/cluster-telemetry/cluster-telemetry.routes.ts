import { pipeline, Readable } from 'node:stream';
import { createGzip } from 'node:zlib';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { LEVEL_RULE_DESCRIPTION } from '../../cluster-telemetry/levels.ts';
import { LOG_LEVELS, type LogLevel } from '../../cluster-telemetry/log-query.ts';
import { entryText } from '../../cluster-telemetry/logs.ts';
import { FRESHNESS_MS, MAX_HISTORY_POINTS, RAW_RANGE_LIMIT_MS } from '../../cluster-telemetry/metrics.ts';
import { listParam, ParamErrors } from '../../cluster-telemetry/params.ts';
import { streamLogs } from '../../cluster-telemetry/stream.ts';
import type { AppContext } from '../../context.ts';
import { Envelope, ok } from '../../http/envelope.ts';
import { wrappedErrors } from '../../http/error-body.ts';
import { sendEventStream } from '../../http/event-stream.ts';
import { actorOf } from '../accounts/common.ts';
import {
  Aggregate,
  AggregateQuery,
  ClusterParams,
  CustomMetric,
  CustomMetricBody,
  DownloadQuery,
  History,
  HistoryQuery,
  LogEntry,
  LogsData,
  LogsMeta,
  LogsQuery,
  SearchBody,
  SearchData,
  Snapshot,
  SnapshotMeta,
  SnapshotQuery,
  StreamQuery,
} from './cluster-telemetry.schemas.ts';

const tags = ['cluster metrics and logs'];
const ACCESS =
  "Needs clusters:read (POST custom: clusters:write); another account's cluster answers 404 CLUSTER_NOT_FOUND.";
const SOURCES =
  "The cluster's container is the workload whose id is the cluster id on the cluster's host; its GPUs are the " +
  "host GPUs at the cluster's GPU indices, named gpu_0..gpu_<n-1> in cluster order (as CUDA numbers them " +
  'inside the container). Values come from the agent samples (every 15 s by default); nothing is estimated: a ' +
  'value the agent does not measure per cluster is null.';
const RANGE =
  `Resolution: raw samples when the range starts within raw retention (24 h by default) and spans at most ` +
  `${RAW_RANGE_LIMIT_MS / 3_600_000} h, else the one-minute rollups (kept 30 days; they trail the newest ` +
  'samples by up to about two minutes). The series read are those of the host the cluster is placed on (or ' +
  'its workload last ran on).';

function levelsOf(value: string | string[] | undefined, errors: ParamErrors): LogLevel[] {
  const levels = listParam(value);
  for (const level of levels) {
    if (!(LOG_LEVELS as readonly string[]).includes(level))
      errors.add('level', `must be one of ${LOG_LEVELS.join(', ')}`);
  }
  return levels as LogLevel[];
}

/** /v1/clusters/{cluster_id}/metrics… and /logs…: thin HTTP over the cluster telemetry domain (wrapped envelope). */
export const clusterTelemetryRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { access, metrics, logs } = context.clusterTelemetry;
  app.addSchema(LogEntry);
  const read = { scope: 'clusters' as const };

  app.get(
    '/v1/clusters/:cluster_id/metrics',
    {
      config: read,
      schema: {
        tags,
        summary: "The cluster's current metrics",
        description:
          `${ACCESS} ${SOURCES} 400 METRICS_NOT_AVAILABLE unless the cluster is running. Only samples of the last ` +
          `${FRESHNESS_MS / 60_000} minutes count as current; timestamp is the newest sample used (null: none yet, ` +
          'values null). gpu: per GPU utilization (percent), memory {used, total (bytes), utilization_percent = used ' +
          '/ total × 100}, temperature (°C, include_temperature), power (W, include_power), clock_speeds (MHz). ' +
          "cpu: utilization = the container's CPU percent of one core / cpu_cores; load_avg = the host's 1/5/15-minute " +
          "load (the container shares the host's kernel); memory_used = container memory without reclaimable page " +
          'cache, memory_total = its Docker memory limit; cores = the cluster cpu_cores; threads null. storage: ' +
          'disk usage is not measured per cluster (null); io_stats read/write bytes per second = difference of the ' +
          "container's cumulative block IO counters between its two newest samples / seconds between them (null " +
          'after a restart); ops null. network: cumulative bytes of the container over all its interfaces since it ' +
          'started; packets null; interfaces [] (Docker reports them summed). processes (include_processes): the ' +
          'GPU processes the driver reports on the cluster GPUs: pid (host namespace), gpu_memory_usage (bytes); ' +
          'other fields null. custom_metrics: the latest value of each custom metric (include_custom). metrics ' +
          'selects sections: a category name or any metric name of a category includes that section. ' +
          'meta.collection_time_ms: time spent reading the samples.',
        params: ClusterParams,
        querystring: SnapshotQuery,
        response: {
          200: Envelope(Snapshot, SnapshotMeta),
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      const { data, meta } = await metrics.snapshot(cluster, request.query);
      // The snapshot's sections are built per query; the response schema checks their shape.
      return ok(request, data as never, meta);
    },
  );

  app.get(
    '/v1/clusters/:cluster_id/metrics/historical',
    {
      config: read,
      schema: {
        tags,
        summary: 'Metric history in intervals',
        description:
          `${ACCESS} ${SOURCES} start_time and end_time are required; interval 1m, 5m (default), 15m, 1h, 6h, 1d; ` +
          `at most ${MAX_HISTORY_POINTS} intervals per range (else 400 INVALID_PARAMETERS naming interval); bad ` +
          'parameters answer 400 INVALID_PARAMETERS with details per parameter. Works in any cluster state. ' +
          'Intervals are aligned to the Unix epoch (UTC) and the first may start before start_time; an interval ' +
          'without samples has no data point (never a made-up zero). aggregation over the samples of an interval: ' +
          'avg = mean; min/max; sum = sum of the sample values (on rollups: avg × samples per minute). From rollups, ' +
          'avg is the sample-weighted mean of the minute averages. GPU metrics have one point per GPU (gpu_id); ' +
          'custom metrics are named custom.<name>. cpu.utilization is divided by cpu_cores like the snapshot. ' +
          `Counters (storage.disk_io_*, network.bytes_*) are cumulative: take differences for rates. ${RANGE}`,
        params: ClusterParams,
        querystring: HistoryQuery,
        response: { 200: Envelope(History), ...wrappedErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      return ok(request, await metrics.historical(cluster, request.query));
    },
  );

  app.get(
    '/v1/clusters/:cluster_id/metrics/aggregated',
    {
      config: read,
      schema: {
        tags,
        summary: 'Summary statistics per metric over a window',
        description:
          `${ACCESS} ${SOURCES} The window is \`window\` (5m, 15m, 1h default, 6h, 24h, 7d, 30d) ending at end_time ` +
          '(default now), or start_time..end_time. For every metric (and every GPU for GPU metrics): count = samples; ' +
          'min, max; avg = mean; p50 and p95 = percentiles with linear interpolation (PostgreSQL percentile_cont); ' +
          'last = the newest sample. From rollups: avg is sample-weighted, min/max exact, p50/p95 are over the ' +
          "per-minute averages and last is the newest minute's last value. A requested metric without samples " +
          'answers count 0 and nulls. Works in any cluster state; 400 INVALID_PARAMETERS per parameter. ' +
          RANGE,
        params: ClusterParams,
        querystring: AggregateQuery,
        response: { 200: Envelope(Aggregate), ...wrappedErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      return ok(request, (await metrics.aggregated(cluster, request.query)) as never);
    },
  );

  app.post(
    '/v1/clusters/:cluster_id/metrics/custom',
    {
      config: read,
      schema: {
        tags,
        summary: 'Record a custom metric value',
        description:
          `${ACCESS} Stores one value (answer 201); it appears in the snapshot's custom_metrics (latest value per ` +
          'name) and in historical/aggregated as custom.<name>. type gauge (default) or counter; timestamp ' +
          'defaults to now and may be at most 5 minutes ahead and no older than metric retention (30 days), else ' +
          '400 INVALID_PARAMETERS. Values are kept as long as metric rollups. Accepted in any cluster state.',
        params: ClusterParams,
        body: CustomMetricBody,
        response: { 201: Envelope(CustomMetric), ...wrappedErrors(400, 401, 403, 404, 413, 429) },
      },
    },
    async (request, reply) => {
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'write');
      return reply.code(201).send(ok(request, await metrics.recordCustom(cluster, request.body)));
    },
  );

  app.get(
    '/v1/clusters/:cluster_id/logs',
    {
      config: read,
      schema: {
        tags,
        summary: "The cluster container's logs",
        description:
          `${ACCESS} ${LEVEL_RULE_DESCRIPTION} Filters combine with AND: log_type, level (one or several), ` +
          'start_time/end_time (inclusive), search (case-insensitive substring of the message), source. limit 1-1000 ' +
          '(default 100), offset. tail=true (default): the page counts back from the newest line (offset 0 = the ' +
          'newest lines); tail=false: from the oldest. Lines are returned oldest first either way, in the order ' +
          'the container wrote them. format=text answers text/plain, one `<timestamp> <LEVEL> [<stream>] <message>` ' +
          'line per entry. pagination.current_page = floor(offset / limit) + 1. meta.log_retention_days: how long ' +
          'lines are kept. Bad parameters: 400 INVALID_PARAMETERS with details per parameter.',
        params: ClusterParams,
        querystring: LogsQuery,
        response: {
          200: {
            content: {
              'application/json': { schema: Envelope(LogsData, LogsMeta) },
              'text/plain': { schema: Type.String() },
            },
          },
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const started = performance.now();
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      const { entries, body } = await logs.list(cluster, request.query);
      if (request.query.format === 'text') {
        return reply.type('text/plain; charset=utf-8').send(entries.map((e) => `${entryText(e)}\n`).join(''));
      }
      return ok(request, body, {
        query_time_ms: Math.round((performance.now() - started) * 10) / 10,
        log_retention_days: logs.retentionDays,
      });
    },
  );

  app.post(
    '/v1/clusters/:cluster_id/logs/search',
    {
      config: read,
      schema: {
        tags,
        summary: 'Search the logs with a boolean query',
        description:
          `${ACCESS} The member needs read on the cluster; the key, as for every POST, the write permission. ` +
          'Query syntax: ' +
          '`field:value`, bare words and "quoted phrases" (case-insensitive substrings of the message), AND, OR, ' +
          'NOT (capitals; lower-case words are search terms), parentheses; adjacent terms mean AND; NOT binds ' +
          'tighter than AND, AND tighter than OR. Fields: level (debug, info, warn, error, fatal), stream ' +
          '(stdout, stderr), source, log_type (or type), message (or msg), container_id (prefix). Example: ' +
          '`level:error AND ("out of memory" OR oom) NOT stream:stdout`. A syntax error answers 400 ' +
          'INVALID_PARAMETERS with details {query: reason, position: 0-based character offset, near: the text ' +
          'there}. time_range {start, end} (inclusive), limit 1-1000 (default 100), offset, sort timestamp:desc ' +
          `(default) or timestamp:asc. data.total_matches counts every match. ${LEVEL_RULE_DESCRIPTION}`,
        params: ClusterParams,
        body: SearchBody,
        response: { 200: Envelope(SearchData, LogsMeta), ...wrappedErrors(400, 401, 403, 404, 413, 429) },
      },
    },
    async (request) => {
      const started = performance.now();
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      const data = await logs.search(cluster, request.body);
      return ok(request, data, {
        query_time_ms: Math.round((performance.now() - started) * 10) / 10,
        log_retention_days: logs.retentionDays,
      });
    },
  );

  app.get(
    '/v1/clusters/:cluster_id/logs/stream',
    {
      config: read,
      schema: {
        tags,
        summary: 'Follow the logs (Server-Sent Events)',
        description:
          `${ACCESS} Answers text/event-stream. Each line is one event: \`id: <log entry id>\`, \`event: log\`, ` +
          '`data: <the log entry as JSON>`. Without Last-Event-ID the stream starts with the newest `tail` lines ' +
          '(default 100, 0 for none); with the Last-Event-ID header (or last_event_id) it resumes with every line ' +
          'after that id, so a reconnecting EventSource misses nothing still retained. follow=true (default) keeps ' +
          'the stream open and sends new lines as they are stored (checked every second); follow=false ends after ' +
          'the lines already stored with `event: end`. A comment line `: heartbeat` is sent every 15 s so proxies ' +
          'keep the connection. The stream ends when the client disconnects. level and search filter as on GET ' +
          '/logs. Lines are sent in the order stored. An account holds at most ANVIL_MAX_LOG_STREAMS open streams ' +
          '(default 50; past it 429 RATE_LIMITED, details.reason max_concurrent_sessions). When the caller loses access ' +
          '(key revoked, member suspended or removed, cluster unshared) the stream ends within seconds with ' +
          '`event: revoked` and `data: {"reason"}`.',
        params: ClusterParams,
        querystring: StreamQuery,
        response: {
          200: { content: { 'text/event-stream': { schema: Type.String() } } },
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      const errors = new ParamErrors();
      const header = request.headers['last-event-id'];
      const lastEventId = (Array.isArray(header) ? header[0] : header) ?? request.query.last_event_id;
      if (lastEventId !== undefined && !/^\d{1,18}$/.test(lastEventId)) {
        errors.add('Last-Event-ID', 'must be a log entry id (digits)');
      }
      const levels = levelsOf(request.query.level, errors);
      errors.throwIfAny();
      const { principal } = actorOf(request);
      const revoked = new AbortController();
      // Counted against the account's limit (429 past it); a revocation of the key, the member or their
      // access to the cluster ends the stream.
      const release = context.liveSessions.hold({
        kind: 'log_stream',
        accountId: cluster.accountId,
        grant: {
          accountId: cluster.accountId,
          userId: principal.userId,
          clusterId: cluster.id,
          permission: 'read',
          apiKeyId: principal.keyId,
        },
        end: (reason) => revoked.abort(reason),
      });
      const stream = streamLogs({
        logs,
        cluster,
        follow: request.query.follow !== false,
        tail: request.query.tail ?? 100,
        afterSeq: lastEventId === undefined ? undefined : Number(lastEventId),
        filter: { levels, search: request.query.search || undefined },
        options: context.clusterTelemetry.streamOptions,
        revoked: revoked.signal,
        onError: (error) => request.log.warn({ err: error }, 'log stream failed'),
      });
      return sendEventStream(reply, stream, release);
    },
  );

  app.get(
    '/v1/clusters/:cluster_id/logs/download',
    {
      config: read,
      schema: {
        tags,
        summary: 'Download the logs (gzip)',
        description:
          `${ACCESS} A gzip file streamed as it is read (Content-Disposition: attachment): format json (default) ` +
          'is JSON Lines, one log entry object per line; text is one `<timestamp> <LEVEL> [<stream>] <message>` ' +
          'line per entry. compression gzip (the only one). start_time/end_time (inclusive) bound the range; ' +
          'without them, every retained line. level filters as on GET /logs. Oldest first.',
        params: ClusterParams,
        querystring: DownloadQuery,
        response: {
          200: { content: { 'application/gzip': { schema: Type.String({ format: 'binary' }) } } },
          ...wrappedErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const cluster = await access.require(actorOf(request), request.params.cluster_id, 'read');
      const errors = new ParamErrors();
      const start = errors.time('start_time', request.query.start_time);
      const end = errors.time('end_time', request.query.end_time);
      errors.order(start, end);
      const levels = levelsOf(request.query.level, errors);
      errors.throwIfAny();
      const text = request.query.format === 'text';
      const pages = logs.export(cluster, { start, end, levels });
      const source = Readable.from(
        (async function* () {
          for await (const page of pages) {
            yield page.map((e) => `${text ? entryText(e) : JSON.stringify(e)}\n`).join('');
          }
        })(),
      );
      const gzip = pipeline(source, createGzip(), (error) => {
        if (error) request.log.warn({ err: error }, 'log download ended early');
      });
      const stamp = context.clock.now().toISOString().replace(/[:.]/g, '-');
      const filename = `${cluster.id}-logs-${stamp}.${text ? 'log' : 'jsonl'}.gz`;
      return reply
        .header('content-type', 'application/gzip')
        .header('content-disposition', `attachment; filename="${filename}"`)
        .send(gzip as never);
    },
  );
};

import type { FastifyReply, FastifyRequest } from 'fastify';
import { LOG_LEVELS, type LogLevel } from '../../cluster-telemetry/log-query.ts';
import { entryText, type ListQuery, type LogSubject, type SearchBody } from '../../cluster-telemetry/logs.ts';
import { listParam, ParamErrors } from '../../cluster-telemetry/params.ts';
import { streamLogs } from '../../cluster-telemetry/stream.ts';
import type { AppContext } from '../../context.ts';
import { sendEventStream } from '../../http/event-stream.ts';

/** How often a follower's access to the job or endpoint is checked again (a revoked caller is cut off). */
export const REVALIDATE_MS = 5_000;

export interface LogTarget {
  subject: LogSubject;
  accountId: string;
  /** The resource's own read check, run again while a stream is open; a throw ends the stream. */
  revalidate(): Promise<unknown>;
}

export type WorkerLogsQuery = ListQuery & {
  follow?: boolean | undefined;
  last_event_id?: string | undefined;
};

/**
 * GET …/logs of a worker: a page of its lines (JSON or text), or with follow=true a Server-Sent Events
 * stream exactly like the cluster's (cluster-telemetry/stream.ts), counted against the account's
 * log-stream limit and ended with `event: revoked` once the caller may no longer read the resource.
 */
export async function serveLogs(
  context: AppContext,
  request: FastifyRequest,
  reply: FastifyReply,
  target: LogTarget,
  query: WorkerLogsQuery,
  page: (body: Record<string, unknown>) => Record<string, unknown>,
): Promise<FastifyReply> {
  const logs = context.clusterTelemetry.logs;
  if (!query.follow) {
    const { entries, body } = await logs.list(target.subject, query);
    if (query.format === 'text') {
      return reply.type('text/plain; charset=utf-8').send(entries.map((e) => `${entryText(e)}\n`).join(''));
    }
    const { cluster_id: _subject, ...rest } = body;
    return reply.send(page({ ...rest, log_retention_days: logs.retentionDays }));
  }
  const errors = new ParamErrors();
  const header = request.headers['last-event-id'];
  const lastEventId = (Array.isArray(header) ? header[0] : header) ?? query.last_event_id;
  if (lastEventId !== undefined && !/^\d{1,18}$/.test(lastEventId)) {
    errors.add('Last-Event-ID', 'must be a log entry id (digits)');
  }
  const levels = listParam(query.level);
  for (const level of levels) {
    if (!(LOG_LEVELS as readonly string[]).includes(level))
      errors.add('level', `must be one of ${LOG_LEVELS.join(', ')}`);
  }
  const backlog = query.limit ?? 100;
  if (backlog < 0 || backlog > 1000) errors.add('limit', 'must be between 0 and 1000 when following');
  errors.throwIfAny();
  const revoked = new AbortController();
  const release = context.liveSessions.hold({
    kind: 'log_stream',
    accountId: target.accountId,
    grant: null,
    end: (reason) => revoked.abort(reason),
  });
  const recheck = setInterval(() => {
    target.revalidate().catch(() => revoked.abort('access to this resource was revoked'));
  }, REVALIDATE_MS);
  recheck.unref();
  const stream = streamLogs({
    logs,
    cluster: target.subject,
    follow: true,
    tail: backlog,
    afterSeq: lastEventId === undefined ? undefined : Number(lastEventId),
    filter: { levels: levels as LogLevel[], search: query.search || undefined },
    options: context.clusterTelemetry.streamOptions,
    revoked: revoked.signal,
    onError: (error) => request.log.warn({ err: error }, 'log stream failed'),
  });
  return sendEventStream(reply, stream, () => {
    clearInterval(recheck);
    release();
  });
}

/** POST …/logs/search of a worker: the cluster logs' boolean query language over its lines. */
export async function searchLogs(
  context: AppContext,
  target: LogTarget,
  body: SearchBody,
  page: (body: Record<string, unknown>) => Record<string, unknown>,
): Promise<never> {
  const logs = context.clusterTelemetry.logs;
  const { cluster_id: _subject, ...rest } = await logs.search(target.subject, body);
  // The page matches the route's response schema, which serialises it.
  return page({ ...rest, log_retention_days: logs.retentionDays }) as never;
}

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { LEVEL_RULE_DESCRIPTION } from '../../cluster-telemetry/levels.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { LogSubjects } from '../../workload-logs/subjects.ts';
import { actorOf } from '../accounts/common.ts';
import { ACCESS as ENDPOINT_ACCESS } from '../endpoints/endpoints.docs.ts';
import { ACCESS as TRAINING_ACCESS } from '../training-jobs/training-jobs.docs.ts';
import { REVALIDATE_MS, searchLogs, serveLogs } from './serve.ts';
import {
  TrainingLogsPage,
  TrainingLogsParams,
  TrainingLogsQuery,
  TrainingSearchBody,
  WorkerList,
  WorkerLogsPage,
  WorkerLogsParams,
  WorkerLogsQuery,
  WorkerSearchBody,
  WorkersParams,
} from './workload-logs.schemas.ts';

const LINES =
  "Lines are the worker container's stdout and stderr as its agent sent them (kept like cluster logs, " +
  `meta log_retention_days). ${LEVEL_RULE_DESCRIPTION}`;
const PAGE =
  'Filters as GET /v1/clusters/{id}/logs: level (one or several), start_time/end_time (inclusive), search ' +
  '(case-insensitive substring), log_type, source; limit 1-1000 (default 100), offset; tail=true (default) ' +
  'pages back from the newest line; lines come oldest first; format=text answers text/plain, one ' +
  '`<timestamp> <LEVEL> [<stream>] <message>` line each. Bad parameters: 400 INVALID_PARAMETERS per parameter.';
const FOLLOW =
  'follow=true answers text/event-stream like GET /v1/clusters/{id}/logs/stream: the newest `limit` lines ' +
  '(default 100, 0 for none) or, with Last-Event-ID (or last_event_id), every line after that id; then new ' +
  'lines as they are stored (`id`, `event: log`, `data: <entry>`), `: heartbeat` comments, never an end while ' +
  'the client stays. It counts against the account’s ANVIL_MAX_LOG_STREAMS (429 past it). The caller’s access ' +
  `is checked again every ${REVALIDATE_MS / 1000} s with the same rule as the read; once lost (key revoked, ` +
  'grant or share withdrawn) the stream ends with `event: revoked`.';
const SEARCH =
  'The boolean query language of POST /v1/clusters/{id}/logs/search (field:value, AND, OR, NOT, quoted ' +
  'phrases; fields level, stream, source, log_type, message, container_id); time_range, limit, offset, sort ' +
  'timestamp:desc|asc; total_matches counts every match. A syntax error: 400 INVALID_PARAMETERS {query, ' +
  'position, near}. As for every POST, the key needs the write permission of its scope; the member only read.';

/**
 * Customers' logs of their training workers and endpoint workers (issue 18 point 3, issue 19 point 4):
 * thin HTTP over the fleet's log store, authorised as a read of the job or endpoint (flat errors).
 */
export const workloadLogRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const subjects = new LogSubjects({
    db: context.db,
    training: context.training.service,
    endpoints: context.endpoints.service,
  });
  const training = { scope: 'training' as const, service: true };
  const endpoints = { scope: 'endpoints' as const };
  const trainingTags = ['training jobs'];
  const endpointTags = ['endpoints'];

  app.get(
    '/v2/training/jobs/:job_id/logs',
    {
      config: training,
      schema: {
        tags: trainingTags,
        summary: "A training worker's logs (page or Server-Sent Events)",
        description:
          `${TRAINING_ACCESS} A member reads a teammate's job as GET /v2/training/jobs/{id} allows (role, grants, ` +
          "shares). rank (default 0) picks the worker, attempt (default the current) the job's run: rank 0 keeps " +
          'one container name across runs (its volume holds the checkpoints), so its lines span every run; a rank ' +
          `other than 0 has one container per run. rank or attempt out of range: 400 INVALID_PARAMETERS. ${LINES} ` +
          `${PAGE} ${FOLLOW}`,
        params: TrainingLogsParams,
        querystring: TrainingLogsQuery,
        response: {
          200: {
            content: {
              'application/json': { schema: TrainingLogsPage },
              'text/plain': { schema: Type.String() },
              'text/event-stream': { schema: Type.String() },
            },
          },
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const actor = actorOf(request);
      const worker = await subjects.trainingWorker(actor, request.params.job_id, request.query);
      const target = {
        ...worker,
        revalidate: () => subjects.trainingWorker(actor, worker.jobId, worker),
      };
      return serveLogs(context, request, reply, target, request.query, (body) => ({
        jobId: worker.jobId,
        rank: worker.rank,
        attempt: worker.attempt,
        workloadId: worker.subject.id,
        ...body,
      }));
    },
  );

  app.post(
    '/v2/training/jobs/:job_id/logs/search',
    {
      config: training,
      schema: {
        tags: trainingTags,
        summary: "Search a training worker's logs with a boolean query",
        description: `${TRAINING_ACCESS} rank and attempt as on GET …/logs. ${SEARCH} ${LINES}`,
        params: TrainingLogsParams,
        body: TrainingSearchBody,
        response: { 200: TrainingLogsPage, ...flatErrors(400, 401, 403, 404, 413, 429) },
      },
    },
    async (request) => {
      const worker = await subjects.trainingWorker(actorOf(request), request.params.job_id, request.body);
      const { rank: _rank, attempt: _attempt, ...search } = request.body;
      return searchLogs(context, { ...worker, revalidate: async () => {} }, search, (body) => ({
        jobId: worker.jobId,
        rank: worker.rank,
        attempt: worker.attempt,
        workloadId: worker.subject.id,
        ...body,
      }));
    },
  );

  app.get(
    '/v2/endpoints/:endpointId/workers',
    {
      config: endpoints,
      schema: {
        tags: endpointTags,
        summary: "The endpoint's workers (newest first, at most 100)",
        description:
          `${ENDPOINT_ACCESS} Every worker the endpoint had, running or gone: id (its logs: logsUrl), status ` +
          '(starting, ready, draining, stopped, failed, lost), statusReason, createdAt, readyAt, stoppedAt.',
        params: WorkersParams,
        response: { 200: WorkerList, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => subjects.endpointWorkers(actorOf(request), request.params.endpointId),
  );

  app.get(
    '/v2/endpoints/:endpointId/workers/:workerId/logs',
    {
      config: endpoints,
      schema: {
        tags: endpointTags,
        summary: "An endpoint worker's logs (page or Server-Sent Events)",
        description:
          `${ENDPOINT_ACCESS} A worker that is not one of the endpoint's: 404 ENDPOINT_WORKER_NOT_FOUND ` +
          `{endpointId, workerId}. ${LINES} ${PAGE} ${FOLLOW}`,
        params: WorkerLogsParams,
        querystring: WorkerLogsQuery,
        response: {
          200: {
            content: {
              'application/json': { schema: WorkerLogsPage },
              'text/plain': { schema: Type.String() },
              'text/event-stream': { schema: Type.String() },
            },
          },
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const actor = actorOf(request);
      const { endpointId, workerId } = request.params;
      const worker = await subjects.endpointWorker(actor, endpointId, workerId);
      const target = { ...worker, revalidate: () => subjects.endpointWorker(actor, endpointId, workerId) };
      return serveLogs(context, request, reply, target, request.query, (body) => ({
        endpointId: worker.endpointId,
        workerId: worker.workerId,
        workloadId: worker.subject.id,
        ...body,
      }));
    },
  );

  app.post(
    '/v2/endpoints/:endpointId/workers/:workerId/logs/search',
    {
      config: endpoints,
      schema: {
        tags: endpointTags,
        summary: "Search an endpoint worker's logs with a boolean query",
        description: `${ENDPOINT_ACCESS} ${SEARCH} ${LINES}`,
        params: WorkerLogsParams,
        body: WorkerSearchBody,
        response: { 200: WorkerLogsPage, ...flatErrors(400, 401, 403, 404, 413, 429) },
      },
    },
    async (request) => {
      const { endpointId, workerId } = request.params;
      const worker = await subjects.endpointWorker(actorOf(request), endpointId, workerId);
      return searchLogs(context, { ...worker, revalidate: async () => {} }, request.body, (body) => ({
        endpointId: worker.endpointId,
        workerId: worker.workerId,
        workloadId: worker.subject.id,
        ...body,
      }));
    },
  );
};

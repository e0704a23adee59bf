import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { DEFAULT_STREAM_WAIT_MS, DEFAULT_SYNC_WAIT_MS } from '../../serverless/execution.ts';
import { actorOf } from '../accounts/common.ts';
import { EXEC_ACCESS, EXECUTION, QUEUE_HEALTH, RUNSYNC, STATUS_SYNC, WORKERS } from './endpoints.docs.ts';
import {
  ExecParams,
  JobAccepted,
  JobParams,
  JobStatusRecord,
  PurgeResult,
  QueueHealth,
  RunBody,
  RunSyncQuery,
  StatusQuery,
  StreamQuery,
  StreamRecord,
} from './endpoints.schemas.ts';

const tags = ['serverless execution'];

/** /v2/<endpoint_id>/…: the execution API, as RunPod's (service keys may call it). */
export const executionRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const execution = context.endpoints.execution;
  app.addSchema(JobStatusRecord);
  const config = { scope: 'endpoints' as const, service: true };
  const errors = flatErrors(400, 401, 403, 404, 429);

  app.post(
    '/v2/:endpoint_id/run',
    {
      config,
      schema: {
        tags,
        summary: 'Queue a job',
        description: `${EXEC_ACCESS} Answers {id, status IN_QUEUE} at once. ${EXECUTION} ${WORKERS}`,
        params: ExecParams,
        body: RunBody,
        response: { 200: JobAccepted, ...errors },
      },
    },
    async (request) => execution.runAsync(actorOf(request), request.params.endpoint_id, request.body),
  );

  app.post(
    '/v2/:endpoint_id/runsync',
    {
      config,
      schema: {
        tags,
        summary: 'Run a job and wait for its result',
        description: `${EXEC_ACCESS} ${RUNSYNC} ${EXECUTION}`,
        params: ExecParams,
        querystring: RunSyncQuery,
        body: RunBody,
        response: { 200: Type.Ref('EndpointJob'), ...errors },
      },
    },
    async (request) =>
      execution.runSync(
        actorOf(request),
        request.params.endpoint_id,
        request.body,
        request.query.wait ?? DEFAULT_SYNC_WAIT_MS,
      ),
  );

  app.get(
    '/v2/:endpoint_id/status/:job_id',
    {
      config,
      schema: {
        tags,
        summary: 'Status of a job',
        description:
          `${EXEC_ACCESS} {id, status, delayTime (ms queued before a worker took it; to now while queued), ` +
          'executionTime (ms on the worker; to now while running), output, error, workerId, retries, attempts, createdAt, ' +
          `startedAt, completedAt, expiresAt}. RunPod's ?ttl= is refused with 400 NOT_SUPPORTED. ${EXECUTION}`,
        params: JobParams,
        querystring: StatusQuery,
        response: { 200: Type.Ref('EndpointJob'), ...errors },
      },
    },
    async (request) =>
      execution.status(actorOf(request), request.params.endpoint_id, request.params.job_id, request.query),
  );

  app.get(
    '/v2/:endpoint_id/status-sync/:job_id',
    {
      config,
      schema: {
        tags,
        summary: 'Status of a job, waiting for it to finish (long poll)',
        description:
          `${EXEC_ACCESS} RunPod's status-sync, which its JavaScript SDK's runSync calls while a job outlives ` +
          `runsync's wait. ${STATUS_SYNC} Answers as /status does. ${EXECUTION}`,
        params: JobParams,
        querystring: RunSyncQuery,
        response: { 200: Type.Ref('EndpointJob'), ...errors },
      },
    },
    async (request) =>
      execution.statusSync(
        actorOf(request),
        request.params.endpoint_id,
        request.params.job_id,
        request.query.wait ?? DEFAULT_SYNC_WAIT_MS,
      ),
  );

  app.get(
    '/v2/:endpoint_id/stream/:job_id',
    {
      config,
      schema: {
        tags,
        summary: 'Partial outputs of a streaming job',
        description:
          `${EXEC_ACCESS} The chunks a streaming worker sent (ndjson lines {"output": …}), each with its seq ` +
          '(1, 2, …). Without offset, as RunPod: the chunks not read by an earlier call (the read position moves ' +
          'atomically, so two readers never get the same chunk); with offset, the chunks after that seq (the ' +
          `position is left alone). Waits up to wait ms (default ${DEFAULT_STREAM_WAIT_MS}, at most 60000) for a ` +
          'chunk while there is none and the job is not final. Answers {id, status, stream [{output, seq}], ' +
          'streamCount, error}.',
        params: JobParams,
        querystring: StreamQuery,
        response: { 200: StreamRecord, ...errors },
      },
    },
    async (request) =>
      execution.stream(actorOf(request), request.params.endpoint_id, request.params.job_id, {
        offset: request.query.offset ?? null,
        waitMs: request.query.wait ?? DEFAULT_STREAM_WAIT_MS,
      }),
  );

  app.post(
    '/v2/:endpoint_id/cancel/:job_id',
    {
      config,
      schema: {
        tags,
        summary: 'Cancel a job',
        description:
          `${EXEC_ACCESS} IN_QUEUE or IN_PROGRESS → CANCELLED (a running request to the worker is aborted; ` +
          'billing follows the worker’s uptime, not the job); a finished job is answered as it is. Answers {id, status}.',
        params: JobParams,
        response: { 200: JobAccepted, ...errors },
      },
    },
    async (request) => execution.cancel(actorOf(request), request.params.endpoint_id, request.params.job_id),
  );

  app.post(
    '/v2/:endpoint_id/retry/:job_id',
    {
      config,
      schema: {
        tags,
        summary: 'Retry a failed or timed-out job',
        description:
          `${EXEC_ACCESS} FAILED or TIMED_OUT → IN_QUEUE with the same id and input, output, error and stream ` +
          'cleared, retries + 1, a fresh ttl. Any other status: 409 JOB_NOT_RETRYABLE {jobId, status, ' +
          'retryableStatuses}. Answers {id, status}.',
        params: JobParams,
        response: { 200: JobAccepted, ...flatErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) => execution.retry(actorOf(request), request.params.endpoint_id, request.params.job_id),
  );

  app.post(
    '/v2/:endpoint_id/purge-queue',
    {
      config,
      schema: {
        tags,
        summary: 'Cancel every queued job',
        description: `${EXEC_ACCESS} Every IN_QUEUE job becomes CANCELLED; running ones go on. Answers {removed, status completed}.`,
        params: ExecParams,
        response: { 200: PurgeResult, ...errors },
      },
    },
    async (request) => execution.purge(actorOf(request), request.params.endpoint_id),
  );

  app.get(
    '/v2/:endpoint_id/health',
    {
      config,
      schema: {
        tags,
        summary: 'Queue and worker counts',
        description: `${EXEC_ACCESS} ${QUEUE_HEALTH}`,
        params: ExecParams,
        response: { 200: QueueHealth, ...errors },
      },
    },
    async (request) => execution.queueHealth(actorOf(request), request.params.endpoint_id),
  );
};

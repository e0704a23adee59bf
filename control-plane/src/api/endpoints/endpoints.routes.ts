import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import type { HealthInclude } from '../../serverless/health.ts';
import { actorOf } from '../accounts/common.ts';
import { ACCESS, CONFIGURATION, HEALTH, WORKERS } from './endpoints.docs.ts';
import {
  BatchHealth,
  BatchHealthBody,
  CreateEndpointBody,
  DeletedEndpoint,
  EndpointList,
  EndpointParams,
  EndpointRecord,
  HealthQuery,
  HealthReport,
  ListQuery,
  LivenessProbe,
  ReadinessProbe,
  UpdatedEndpoint,
  UpdateEndpointBody,
} from './endpoints.schemas.ts';

const tags = ['serverless endpoints'];

/** /v2/endpoints: thin HTTP over the endpoints domain (flat errors, bare bodies). */
export const endpointRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { service, health } = context.endpoints;
  app.addSchema(EndpointRecord);
  app.addSchema(HealthReport);
  const config = { scope: 'endpoints' as const };

  app.post(
    '/v2/endpoints',
    {
      config,
      schema: {
        tags,
        summary: 'Create a serverless endpoint',
        description:
          `${ACCESS} name, gpuType and image (or templateId, whose image, environment variables and startup ` +
          'script are used; the request’s own fields win) are required; gpuCount (GPUs per worker, 1-8) defaults ' +
          'to 1. Answers 201 with the endpoint (status pending, or inactive when no worker is wanted); workers ' +
          'start in the background. No host could ever run a worker (GPU type and count): 422 ' +
          'INSUFFICIENT_RESOURCES {requestedGpuType, availableGpuTypes}; capacity only busy: it stays pending. ' +
          `The role's maxEndpoints limits how many a member creates (403 LIMIT_EXCEEDED). ${CONFIGURATION} ${WORKERS}`,
        body: CreateEndpointBody,
        response: { 201: Type.Ref('Endpoint'), ...flatErrors(400, 401, 403, 422, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(await service.create(actorOf(request), request.body)),
  );

  app.get(
    '/v2/endpoints',
    {
      config,
      schema: {
        tags,
        summary: "The account's endpoints",
        description:
          `${ACCESS} Newest first (created, then id); status filters exactly; pagination.total counts every ` +
          'match, hasMore = offset + returned < total.',
        querystring: ListQuery,
        response: { 200: EndpointList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => service.list(actorOf(request), request.query),
  );

  app.get(
    '/v2/endpoints/:endpointId',
    {
      config,
      schema: {
        tags,
        summary: 'One endpoint',
        description:
          `${ACCESS} url = <ANVIL_PUBLIC_URL>/v2/<endpoint_id>/runsync. metrics cover the last 30 days of the job ` +
          'table: totalExecutions = jobs a worker ran that finished in the window; averageLatency = mean ms from ' +
          'submission to completion of the COMPLETED ones; lastExecution = the latest completion. workers: target ' +
          '(workerCount or the autoscaler’s), ready, starting, draining.',
        params: EndpointParams,
        response: { 200: Type.Ref('Endpoint'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => service.get(actorOf(request), request.params.endpointId),
  );

  app.put(
    '/v2/endpoints/:endpointId',
    {
      config,
      schema: {
        tags,
        summary: 'Update the configuration',
        description:
          `${ACCESS} Every field is optional; given ones replace the stored ones (autoScaling field by field, ` +
          'environmentVariables as a whole). Answers {id, name, status updating, configuration, updatedAt}; the ' +
          'configuration is applied gradually: the worker count moves to the new target, and when ' +
          'environmentVariables, maxConcurrency or workerProtocol change (they reach the container) each worker is replaced: new ' +
          'ones start, and old ones are drained (finish their jobs) as new ones become ready. The status returns ' +
          'to active once done. A change that replaces workers (environmentVariables, maxConcurrency, workerProtocol) is ' +
          'refused with 409 ENDPOINT_BUSY {activeRequests, rollingFields, suggestion} while jobs are IN_PROGRESS, ' +
          'changing nothing; scaling (workerCount, autoScaling) and timeoutSeconds apply at once while jobs run. ' +
          `${CONFIGURATION}`,
        params: EndpointParams,
        body: UpdateEndpointBody,
        response: { 200: UpdatedEndpoint, ...flatErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) => service.update(actorOf(request), request.params.endpointId, request.body),
  );

  app.delete(
    '/v2/endpoints/:endpointId',
    {
      config,
      schema: {
        tags,
        summary: 'Delete an endpoint',
        description:
          `${ACCESS} The endpoint is gone at once (404 afterwards, its id never reused): its IN_QUEUE and ` +
          'IN_PROGRESS jobs are CANCELLED (running requests are aborted), and its workers’ containers are ' +
          'removed by the supervisor right after (a restarted control plane carries that on; an unreachable ' +
          'host’s agent removes them when it reconnects), so no container is left behind. Answers {id, deleted, ' +
          'deletedAt, cancelledJobs, workersStopping}.',
        params: EndpointParams,
        response: { 200: DeletedEndpoint, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => service.delete(actorOf(request), request.params.endpointId),
  );

  const includeOf = (value: string | undefined): HealthInclude[] =>
    value ? ([...new Set(value.split(','))] as HealthInclude[]) : [];

  app.get(
    '/v2/endpoints/:endpointId/health',
    {
      config,
      schema: {
        tags,
        summary: 'Health report',
        description: `${ACCESS} ${HEALTH}`,
        params: EndpointParams,
        querystring: HealthQuery,
        response: { 200: Type.Ref('EndpointHealthReport'), ...flatErrors(400, 401, 403, 404, 408, 429, 503) },
      },
    },
    async (request) =>
      health.report(actorOf(request), request.params.endpointId, {
        check: request.query.check ?? 'basic',
        timeoutMs: (request.query.timeout ?? 10) * 1000,
        include: includeOf(request.query.include),
      }),
  );

  app.post(
    '/v2/endpoints/health/batch',
    {
      // It only reads: a read key may ask, as it may for one endpoint's health.
      config: { ...config, permission: 'read' as const },
      schema: {
        tags,
        summary: 'Health reports of several endpoints',
        description:
          `${ACCESS} A POST that only reads: read keys may call it. endpointIds (1-50), check and include as for one endpoint; timeout (1-30 s, default 10) covers ` +
          'the whole batch. Answers {reports (in the order asked, duplicates once), errors [{endpointId, error, ' +
          'message, code}] for unknown or other accounts’ ids, summary {total, healthy, degraded, unhealthy}}; a ' +
          `batch over its timeout answers 408 HEALTH_CHECK_TIMEOUT. ${HEALTH}`,
        body: BatchHealthBody,
        response: { 200: BatchHealth, ...flatErrors(400, 401, 403, 408, 429, 503) },
      },
    },
    async (request) =>
      health.batch(actorOf(request), request.body.endpointIds, {
        check: request.body.check ?? 'basic',
        timeoutMs: (request.body.timeout ?? 10) * 1000,
        include: [...new Set(request.body.include ?? [])],
      }),
  );

  app.get(
    '/v2/endpoints/:endpointId/ready',
    {
      config,
      schema: {
        tags,
        summary: 'Readiness probe',
        description:
          `${ACCESS} ready = gates model (a worker is ready: its container runs and GET /health answered 2xx), ` +
          'dependencies (the ready workers’ hosts are ready) and networking (a ready worker’s last GET /health ' +
          'passed); resources = workers are placed (or none wanted). Answers 200 when ready, 503 with the same ' +
          'body when not (as Kubernetes probes expect).',
        params: EndpointParams,
        response: { 200: ReadinessProbe, 503: ReadinessProbe, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request, reply) => {
      const probe = await health.ready(actorOf(request), request.params.endpointId);
      return reply.code(probe.ready ? 200 : 503).send(probe);
    },
  );

  app.get(
    '/v2/endpoints/:endpointId/live',
    {
      config,
      schema: {
        tags,
        summary: 'Liveness probe',
        description:
          `${ACCESS} alive unless the endpoint is in error (its workers keep failing to start or run); answers ` +
          '200 when alive, 503 with the same body otherwise. uptime: since the longest-ready worker became ' +
          'ready (null with none); version: config-<n>.',
        params: EndpointParams,
        response: { 200: LivenessProbe, 503: LivenessProbe, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request, reply) => {
      const probe = await health.live(actorOf(request), request.params.endpointId);
      return reply.code(probe.alive ? 200 : 503).send(probe);
    },
  );
};

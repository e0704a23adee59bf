import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { controlPlaneUrlOf, installCommand } from '../agent-downloads/artifacts.routes.ts';
import {
  CreatedJoinToken,
  CreateJoinTokenBody,
  DeleteHostQuery,
  HostDetailRecord,
  HostGpuParams,
  HostIdParams,
  HostRecord,
  HostWorkload,
  JoinTokenIdParams,
  JoinTokenRecord,
  LogsQuery,
  LogsResponse,
  MetricsQuery,
  MetricsResponse,
  ReasonBody,
  WorkloadIdParams,
  WorkloadRecord,
} from './admin.schemas.ts';
import { requireOperator } from './operator.ts';

const HOUR_MS = 3_600_000;

/**
 * The operators' API for the host fleet: join tokens, hosts (list, detail, cordon, uncordon, drain,
 * delete), and what hosts report (metrics, workload status and logs). Owners and admins of the
 * operators' account only.
 */
export const adminHostRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { fleet } = context;
  app.addSchema(JoinTokenRecord);
  app.addSchema(HostRecord);
  app.addSchema(HostDetailRecord);
  app.addHook('onRequest', requireOperator(context));
  const tags = ['admin'];
  const config = { scope: 'accounts' as const };

  app.post(
    '/v2/admin/hosts/join-tokens',
    {
      config,
      schema: {
        tags,
        summary: 'Create a join token for new hosts (the value is returned once)',
        body: CreateJoinTokenBody,
        response: { 201: CreatedJoinToken, ...flatErrors(400, 401, 403, 413, 429) },
      },
    },
    async (request, reply) => {
      const principal = request.principal!;
      const { token, value } = await fleet.joinTokens.create(
        { userId: principal.userId, keyId: principal.keyId },
        request.body,
      );
      return reply.code(201).send({
        token,
        value,
        installCommand: installCommand(controlPlaneUrlOf(request, context.config.publicUrl), value),
        message: 'Store this token now: it will not be shown again.',
      });
    },
  );

  app.get(
    '/v2/admin/hosts/join-tokens',
    {
      config,
      schema: {
        tags,
        summary: 'List join tokens (never their values)',
        response: {
          200: Type.Object({ join_tokens: Type.Array(Type.Ref('HostJoinToken')), total: Type.Integer() }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async () => {
      const tokens = await fleet.joinTokens.list();
      return { join_tokens: tokens, total: tokens.length };
    },
  );

  app.delete(
    '/v2/admin/hosts/join-tokens/:token_id',
    {
      config,
      schema: {
        tags,
        summary: 'Revoke a join token; hosts that registered with it keep working',
        params: JoinTokenIdParams,
        response: {
          200: Type.Object({ token: Type.Ref('HostJoinToken'), message: Type.String() }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const token = await fleet.joinTokens.revoke(request.params.token_id);
      return { token, message: `join token ${token.id} revoked` };
    },
  );

  app.get(
    '/v2/admin/hosts',
    {
      config,
      schema: {
        tags,
        summary: 'List hosts: status, inventory summary, allocations, last heartbeat, agent version',
        response: {
          200: Type.Object({ hosts: Type.Array(Type.Ref('Host')), total: Type.Integer() }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async () => {
      const hosts = await fleet.hosts.list();
      return { hosts, total: hosts.length };
    },
  );

  app.get(
    '/v2/admin/hosts/:host_id',
    {
      config,
      schema: {
        tags,
        summary: 'A host with its full inventory and workloads',
        params: HostIdParams,
        response: { 200: Type.Object({ host: Type.Ref('HostDetail') }), ...flatErrors(401, 403, 404, 429) },
      },
    },
    async (request) => ({ host: await fleet.hosts.get(request.params.host_id) }),
  );

  app.post(
    '/v2/admin/hosts/:host_id/cordon',
    {
      config,
      schema: {
        tags,
        summary: 'Cordon: place nothing new on the host; what runs keeps running',
        params: HostIdParams,
        body: Type.Optional(ReasonBody),
        response: {
          200: Type.Object({ host: Type.Ref('HostDetail'), message: Type.String() }),
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const host = await fleet.hosts.cordon(request.params.host_id, request.body?.reason ?? null);
      return { host, message: `host ${host.id} cordoned` };
    },
  );

  app.post(
    '/v2/admin/hosts/:host_id/uncordon',
    {
      config,
      schema: {
        tags,
        summary: 'Uncordon: the host takes new work again',
        params: HostIdParams,
        response: {
          200: Type.Object({ host: Type.Ref('HostDetail'), message: Type.String() }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const host = await fleet.hosts.uncordon(request.params.host_id);
      return { host, message: `host ${host.id} uncordoned` };
    },
  );

  app.post(
    '/v2/admin/hosts/:host_id/gpus/:index/reset-health',
    {
      config,
      schema: {
        tags,
        summary: "Reset a GPU's kept health to healthy (after the board was checked, reseated or replaced)",
        description:
          'The control plane keeps the worst health state each GPU reported (healthy < degraded < failed) until ' +
          'an operator resets it here: a GPU that threw XID 79 once may look fine on its next sample and fail the ' +
          'next job. A failed GPU is not offered to placement (the host keeps taking work on its other GPUs); ' +
          'clusters on it carry the reason in status_reason and, with ANVIL_FAILED_GPU_POLICY=stop, were failed. ' +
          'The reset makes the GPU schedulable again and takes the reason back from clusters still on it; if the ' +
          'agent still reports the fault, the GPU turns degraded or failed again with its next sample. Recorded in ' +
          "the operators' audit log (type fleet_change). Operators only; 404 when the host or GPU index is unknown.",
        params: HostGpuParams,
        response: {
          200: Type.Object({
            host: Type.Ref('HostDetail'),
            previous: Type.Union(
              [
                Type.Object({
                  state: Type.String(),
                  reasons: Type.Array(
                    Type.Object(
                      { code: Type.String(), message: Type.String() },
                      { additionalProperties: true },
                    ),
                  ),
                }),
                Type.Null(),
              ],
              { description: 'The kept health before the reset; null when the GPU never reported any' },
            ),
            changed: Type.Boolean({
              description: 'False when the GPU was healthy (or never reported) already',
            }),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const principal = request.principal!;
      const { host_id: hostId, index } = request.params;
      const { previous, change } = await fleet.gpuHealth.reset(hostId, index, {
        userId: principal.userId,
        ip: request.ip,
      });
      const host = await fleet.hosts.get(hostId);
      return {
        host,
        previous,
        changed: change !== null,
        message: change
          ? `GPU ${index} of host ${hostId} reset from ${change.from} to healthy`
          : `GPU ${index} of host ${hostId} was not degraded or failed; nothing to reset`,
      };
    },
  );

  app.post(
    '/v2/admin/hosts/:host_id/drain',
    {
      config,
      schema: {
        tags,
        summary: 'Drain: cordon and report what still runs (nothing is moved or stopped by force)',
        params: HostIdParams,
        body: Type.Optional(ReasonBody),
        response: {
          200: Type.Object({
            host: Type.Ref('HostDetail'),
            remaining: Type.Array(HostWorkload),
            drained: Type.Boolean({ description: 'True when no workload is left on the host' }),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const { host, remaining } = await fleet.hosts.drain(
        request.params.host_id,
        request.body?.reason ?? null,
      );
      return {
        host,
        remaining,
        drained: remaining.length === 0,
        message:
          remaining.length === 0
            ? `host ${host.id} is cordoned and empty`
            : `host ${host.id} is cordoned; ${remaining.length} workload(s) still on it`,
      };
    },
  );

  app.delete(
    '/v2/admin/hosts/:host_id',
    {
      config,
      schema: {
        tags,
        summary: "Delete a host: its credential stops working and its agent's connection is closed",
        description:
          'A host with workloads that are not yet gone answers 409 HOST_HAS_WORKLOADS unless force=true. ' +
          'Containers already running on the machine are not stopped by this call: drain the host first.',
        params: HostIdParams,
        querystring: DeleteHostQuery,
        response: {
          200: Type.Object({ host: Type.Ref('HostDetail'), message: Type.String() }),
          ...flatErrors(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request) => {
      const host = await fleet.hosts.delete(request.params.host_id, request.query.force === true);
      return { host, message: `host ${host.id} deleted; its credential no longer works` };
    },
  );

  app.get(
    '/v2/admin/hosts/:host_id/metrics',
    {
      config,
      schema: {
        tags,
        summary: "A host's metric series: raw samples or one-minute rollups",
        description:
          'kind host (default): CPU, load, memory, disks, disk IO, network per interface. gpu: one series per ' +
          'GPU UUID. container: one series per workload. Counters are cumulative; rates are their differences. ' +
          'Rollups hold avg, min, max and last of every value per minute.',
        params: HostIdParams,
        querystring: MetricsQuery,
        response: { 200: MetricsResponse, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const hostId = request.params.host_id;
      await fleet.hosts.get(hostId);
      const q = request.query;
      const to = q.to ? new Date(q.to) : context.clock.now();
      const from = q.from ? new Date(q.from) : new Date(to.getTime() - HOUR_MS);
      const kind = q.kind ?? 'host';
      const resolution = q.resolution ?? 'raw';
      const query = { hostId, kind, series: q.series, from, to, limit: q.limit };
      const points =
        resolution === 'raw'
          ? await fleet.telemetry.queryMetrics(query)
          : (await fleet.telemetry.queryRollups(query)).map((p) => ({
              series: p.series,
              at: p.bucket,
              samples: p.samples,
              data: p.data,
            }));
      return { hostId, kind, resolution, from: from.toISOString(), to: to.toISOString(), points };
    },
  );

  app.get(
    '/v2/admin/workloads/:workload_id',
    {
      config,
      schema: {
        tags,
        summary: 'A workload as its host reports it: desired and actual state, pull progress',
        params: WorkloadIdParams,
        response: { 200: Type.Object({ workload: WorkloadRecord }), ...flatErrors(401, 403, 404, 429) },
      },
    },
    async (request) => ({ workload: await fleet.workloads.get(request.params.workload_id) }),
  );

  app.get(
    '/v2/admin/workloads/:workload_id/logs',
    {
      config,
      schema: {
        tags,
        summary: "A workload's container logs (stdout and stderr, kept 7 days), after a sequence number",
        params: WorkloadIdParams,
        querystring: LogsQuery,
        response: { 200: LogsResponse, ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => {
      const workloadId = request.params.workload_id;
      await fleet.workloads.get(workloadId);
      const after = request.query.after ?? 0;
      const [lines, losses] = await Promise.all([
        fleet.telemetry.queryLogs({ workloadId, afterSeq: after, limit: request.query.limit ?? 1000 }),
        fleet.telemetry.logLosses(workloadId),
      ]);
      return {
        workloadId,
        lines: lines.map(({ workloadId: _, ...line }) => line),
        next: lines.at(-1)?.seq ?? after,
        losses: losses.map(({ workloadId: _, ...loss }) => loss),
      };
    },
  );
};

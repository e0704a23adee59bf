import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.ts';
import type { Prisma } from '../../db/generated/client.ts';
import { flatErrors } from '../../http/error-body.ts';
import { ADMIN_CLUSTER_STATUSES, AdminClusterList, AdminClustersQuery } from './admin.schemas.ts';
import { requireOperator } from './operator.ts';

/**
 * GET /v2/admin/clusters: every account's GPU clusters, for operators (who uses which host, what waits in
 * the placement queue and since when). Owners and admins of the operators' account only.
 */
export const adminClusterRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.addHook('onRequest', requireOperator(context));

  app.get(
    '/v2/admin/clusters',
    {
      config: { scope: 'accounts' as const },
      schema: {
        tags: ['admin'],
        summary: "Every account's clusters, newest first, with a summary by status",
        description:
          'Filters combine (AND). Pending clusters waiting for room carry queuedAt; their place in the queue ' +
          'follows the rule of POST /v1/clusters. summary counts every match; hasMore = offset + returned < total.',
        querystring: AdminClustersQuery,
        response: { 200: AdminClusterList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const q = request.query;
      const statuses = q.status
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      const unknown = statuses?.filter((s) => !ADMIN_CLUSTER_STATUSES.includes(s)) ?? [];
      if (unknown.length > 0) {
        throw new ApiError('VALIDATION_ERROR', `unknown status ${unknown.join(', ')}`, {
          field: 'status',
          allowed: ADMIN_CLUSTER_STATUSES,
        });
      }
      const where: Prisma.ClusterWhereInput = {
        status: statuses?.length ? { in: statuses } : { not: 'deleted' },
        ...(q.id ? { id: q.id } : {}),
        ...(q.account_id ? { accountId: q.account_id } : {}),
        ...(q.host_id ? { hostId: q.host_id } : {}),
        ...(q.gpu_type ? { gpuType: q.gpu_type } : {}),
      };
      const limit = q.limit ?? 100;
      const offset = q.offset ?? 0;
      const prisma = context.db.prisma;
      const [rows, groups] = await Promise.all([
        prisma.cluster.findMany({
          where,
          orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
          take: limit,
          skip: offset,
        }),
        prisma.cluster.groupBy({
          by: ['status'],
          where,
          _count: { _all: true },
        }),
      ]);
      const [held, waiting] = await Promise.all([
        prisma.cluster.aggregate({
          where: { AND: [where, { NOT: { gpuIndices: { isEmpty: true } } }] },
          _sum: { gpuCount: true },
        }),
        prisma.cluster.aggregate({
          where: { AND: [where, { status: 'pending', gpuIndices: { isEmpty: true } }] },
          _sum: { gpuCount: true },
        }),
      ]);
      const accountIds = [...new Set(rows.map((row) => row.accountId))];
      const accounts = new Map(
        (
          await prisma.account.findMany({
            where: { id: { in: accountIds } },
            select: { id: true, name: true, tier: true },
          })
        ).map((account) => [account.id, account]),
      );
      const byStatus: Record<string, number> = {};
      let total = 0;
      for (const group of groups) {
        byStatus[group.status] = group._count._all;
        total += group._count._all;
      }
      return {
        clusters: rows.map((row) => ({
          id: row.id,
          name: row.name,
          status: row.status,
          statusReason: row.statusReason,
          account: accounts.get(row.accountId) ?? { id: row.accountId, name: '', tier: '' },
          gpuType: row.gpuType,
          gpuCount: row.gpuCount,
          region: row.region,
          hostId: row.hostId,
          gpuIndices: row.gpuIndices,
          queuedAt: row.queuedAt?.toISOString() ?? null,
          hourlyRate: row.hourlyRate,
          expiresAt: row.expiresAt?.toISOString() ?? null,
          createdAt: row.createdAt.toISOString(),
          updatedAt: row.updatedAt.toISOString(),
        })),
        pagination: { total, limit, offset, hasMore: offset + rows.length < total },
        summary: {
          byStatus,
          gpusHeld: held._sum.gpuCount ?? 0,
          pendingGpus: waiting._sum.gpuCount ?? 0,
        },
      };
    },
  );
};

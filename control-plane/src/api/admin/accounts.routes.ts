import { ApiError, newId } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type Static, Type } from '@sinclair/typebox';
import { checkEmail } from '../../accounts/validation.ts';
import type { AppContext } from '../../context.ts';
import type { Account, Prisma } from '../../db/generated/client.ts';
import { flatErrors } from '../../http/error-body.ts';
import { InvitationRecord } from '../accounts/common.ts';
import {
  AccountIdParams,
  AdminAccount,
  AdminAccountList,
  AdminAccountsQuery,
  CreateAccountBody,
  UpdateAccountBody,
} from './admin.schemas.ts';
import { requireOperator } from './operator.ts';

/** Cluster statuses that hold or wait for capacity (everything but stopped and deleted). */
const ACTIVE_CLUSTER = ['pending', 'starting', 'running', 'stopping', 'deleting', 'error'];

/**
 * Tenants, for operators: list accounts with their members and usage, create one (its owner is invited
 * and accepts through POST /v2/accounts/team/invitations/{token}/accept like any invitee), rename it or
 * change its rate-limit tier. Owners and admins of the operators' account only.
 */
export const adminAccountRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.addHook('onRequest', requireOperator(context));
  const tags = ['admin'];
  const config = { scope: 'accounts' as const };
  const prisma = context.db.prisma;

  /** The accounts with their member, invitation and cluster counts (one query each for the page). */
  async function withCounts(accounts: Account[]): Promise<AdminAccountView[]> {
    const ids = accounts.map((a) => a.id);
    const now = context.clock.now();
    const [members, invitations, clusters, held] = await Promise.all([
      prisma.user.groupBy({
        by: ['accountId', 'status'],
        where: { accountId: { in: ids } },
        _count: { _all: true },
      }),
      prisma.invitation.groupBy({
        by: ['accountId'],
        where: { accountId: { in: ids }, status: { in: ['sent', 'resent'] }, expiresAt: { gt: now } },
        _count: { _all: true },
      }),
      prisma.cluster.groupBy({
        by: ['accountId'],
        where: { accountId: { in: ids }, status: { in: ACTIVE_CLUSTER } },
        _count: { _all: true },
      }),
      prisma.cluster.groupBy({
        by: ['accountId'],
        where: { accountId: { in: ids }, NOT: { gpuIndices: { isEmpty: true } } },
        _sum: { gpuCount: true },
      }),
    ]);
    return accounts.map((account) => {
      const count = (status: string) =>
        members.find((m) => m.accountId === account.id && m.status === status)?._count._all ?? 0;
      return {
        id: account.id,
        name: account.name,
        tier: account.tier,
        operator: account.operator,
        members: { active: count('active'), suspended: count('suspended') },
        pendingInvitations: invitations.find((i) => i.accountId === account.id)?._count._all ?? 0,
        clusters: {
          active: clusters.find((c) => c.accountId === account.id)?._count._all ?? 0,
          gpusHeld: held.find((c) => c.accountId === account.id)?._sum.gpuCount ?? 0,
        },
        createdAt: account.createdAt.toISOString(),
        updatedAt: account.updatedAt.toISOString(),
      };
    });
  }

  async function find(accountId: string): Promise<Account> {
    const account = await prisma.account.findUnique({ where: { id: accountId } });
    if (!account) throw new ApiError('NOT_FOUND', `no account ${accountId}`, { accountId });
    return account;
  }

  app.get(
    '/v2/admin/accounts',
    {
      config,
      schema: {
        tags,
        summary: 'Accounts (tenants) with their members, pending invitations, active clusters and GPUs held',
        description: 'Newest first. hasMore = offset + returned < total.',
        querystring: AdminAccountsQuery,
        response: { 200: AdminAccountList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const q = request.query;
      const where: Prisma.AccountWhereInput = {
        ...(q.tier ? { tier: q.tier } : {}),
        ...(q.search ? { name: { contains: q.search, mode: 'insensitive' } } : {}),
      };
      const limit = q.limit ?? 100;
      const offset = q.offset ?? 0;
      const [rows, total] = await Promise.all([
        prisma.account.findMany({
          where,
          orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
          take: limit,
          skip: offset,
        }),
        prisma.account.count({ where }),
      ]);
      return {
        accounts: await withCounts(rows),
        pagination: { total, limit, offset, hasMore: offset + rows.length < total },
      };
    },
  );

  app.post(
    '/v2/admin/accounts',
    {
      config,
      schema: {
        tags,
        summary: 'Create an account and invite its owner',
        description:
          'The account starts with no members: ownerEmail gets an owner invitation (inviteUrl, and an e-mail ' +
          'when ANVIL_SMTP_URL is set). Accepting it makes them the owner and returns their first API key. ' +
          'The account is never an operators account. tier defaults to free.',
        body: CreateAccountBody,
        response: {
          201: Type.Object({
            account: AdminAccount,
            invitation: Type.Object(InvitationRecord.properties),
            inviteUrl: Type.String({ description: 'Shown once: only the token hash is stored' }),
            emailDelivery: Type.String({ description: 'sent, not_configured or failed' }),
          }),
          ...flatErrors(400, 401, 403, 413, 429),
        },
      },
    },
    async (request, reply) => {
      const principal = request.principal!;
      const operator = await prisma.user.findUnique({ where: { id: principal.userId } });
      const body = request.body;
      // Refused before anything is written, as team invitations check it.
      const ownerEmail = checkEmail(body.ownerEmail);
      const account = await prisma.account.create({
        data: { id: newId('acc'), name: body.name.trim(), tier: body.tier ?? 'free', operator: false },
      });
      try {
        const invited = await context.accounts.invitations.inviteOwner({
          accountId: account.id,
          email: ownerEmail,
          expiresIn: body.expiresIn,
          message: body.message,
          invitedBy: {
            userId: principal.userId,
            name: operator?.name ?? operator?.email ?? 'Anvil operators',
            ip: request.ip ?? null,
          },
        });
        const [view] = await withCounts([account]);
        return reply.code(201).send({ account: view!, ...invited });
      } catch (error) {
        // A failed invitation leaves no ownerless account behind.
        await prisma.account.delete({ where: { id: account.id } }).catch(() => {});
        throw error;
      }
    },
  );

  app.patch(
    '/v2/admin/accounts/:account_id',
    {
      config,
      schema: {
        tags,
        summary: "Rename an account or change its rate-limit tier (its members' keys follow at once)",
        params: AccountIdParams,
        body: UpdateAccountBody,
        response: {
          200: Type.Object({ account: AdminAccount }),
          ...flatErrors(400, 401, 403, 404, 413, 429),
        },
      },
    },
    async (request) => {
      const current = await find(request.params.account_id);
      const body = request.body;
      const account = await prisma.account.update({
        where: { id: current.id },
        data: { ...(body.name ? { name: body.name.trim() } : {}), ...(body.tier ? { tier: body.tier } : {}) },
      });
      // Resolved keys carry their account's tier: drop them in every process so limits change now.
      if (body.tier && body.tier !== current.tier) await context.keys.invalidate();
      const [view] = await withCounts([account]);
      return { account: view! };
    },
  );
};

type AdminAccountView = Static<typeof AdminAccount>;

import { ApiError } from '@anvil/shared';
import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.ts';

export const OPERATOR_ROLES: readonly string[] = ['owner', 'admin'];

/**
 * Operators' routes (/v2/admin): the key must belong to the operators' account (the bootstrap owner's)
 * and to one of its owners or admins. Registered as an onRequest hook of the admin plugins, so it runs
 * after the key is resolved and its scope checked, and before the body is validated.
 */
export function requireOperator(context: AppContext) {
  return async (request: FastifyRequest): Promise<void> => {
    const principal = request.principal;
    if (!principal) throw new ApiError('UNAUTHORIZED', 'missing API key', { reason: 'missing' });
    const account = await context.db.prisma.account.findUnique({
      where: { id: principal.accountId },
      select: { operator: true },
    });
    if (!account?.operator || !OPERATOR_ROLES.includes(principal.userRole)) {
      throw new ApiError(
        'INSUFFICIENT_PERMISSIONS',
        'operators only: this needs an owner or admin of the operators account',
        {
          requiredRoles: [...OPERATOR_ROLES],
          operatorAccount: account?.operator ?? false,
          role: principal.userRole,
        },
      );
    }
  };
}

import { ApiError } from '@anvil/shared';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.ts';
import { looksLikeUploadToken } from '../../datasets/tokens.ts';
import type { Dataset } from '../../db/generated/client.ts';
import { authorize } from '../../http/authorize.ts';
import { admitOrRefuse } from '../../http/rate-limit.ts';

/**
 * The upload routes are public to the request guard (an upload token is not an API key), so they
 * authenticate here: `Bearer dsu_…` opens its one dataset; anything else must be an API key that may
 * write in the training scope, held by a member whose role may write datasets, and then the dataset
 * must be of the key's account.
 */
export async function datasetForUpload(
  context: AppContext,
  request: FastifyRequest,
  reply: FastifyReply,
  datasetId: string,
): Promise<Dataset> {
  const header = request.headers.authorization;
  const bearer = header?.match(/^Bearer\s+(\S+)\s*$/i)?.[1];
  if (!bearer)
    throw new ApiError('UNAUTHORIZED', 'an upload token or API key is required (Authorization: Bearer …)');
  // Counted by the rate limiter like every authenticated request: against the key's account, or for a
  // token against the dataset's account (a refused token is not counted, as a refused key is not).
  const count = (account: { accountId: string; tier: string }) =>
    admitOrRefuse(
      context.rateLimits,
      account as never,
      request.method,
      request.routeOptions.config.url ?? request.url,
      {
        priority: request.headers['x-priority'],
        reply,
      },
    );
  if (looksLikeUploadToken(bearer)) {
    const dataset = await context.datasets.service.openWithToken(datasetId, bearer);
    const account = await context.db.prisma.account.findUniqueOrThrow({
      where: { id: dataset.accountId },
      select: { id: true, tier: true },
    });
    await count({ accountId: account.id, tier: account.tier });
    return dataset;
  }
  const principal = await context.keys.resolve(header);
  request.principal = principal;
  await count(principal);
  authorize(principal, request.method, 'training', false);
  // The key may write in the training scope; its member's role must also allow writing datasets.
  await context.datasets.service.requireAccess({ principal, ip: request.ip ?? null }, 'write');
  return context.datasets.service.find(principal.accountId, datasetId);
}

/** The declared Content-Length, or null for a chunked body. */
export function contentLengthOf(request: FastifyRequest): number | null {
  const raw = request.headers['content-length'];
  if (raw === undefined) return null;
  const value = Number(raw);
  return Number.isSafeInteger(value) && value >= 0 ? value : null;
}

import { ApiError } from '@anvil/shared';
import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.ts';
import { looksLikeUploadToken } from '../../datasets/tokens.ts';
import type { Dataset } from '../../db/generated/client.ts';
import { authorize } from '../../http/authorize.ts';

/**
 * The upload routes are public to the request guard (an upload token is not an API key), so they
 * authenticate here: `Bearer dsu_…` opens its one dataset; anything else must be an API key that may
 * write in the training scope, held by a member whose role may write datasets, and then the dataset
 * must be of the key's account.
 */
export async function datasetForUpload(
  context: AppContext,
  request: FastifyRequest,
  datasetId: string,
): Promise<Dataset> {
  const header = request.headers.authorization;
  const bearer = header?.match(/^Bearer\s+(\S+)\s*$/i)?.[1];
  if (!bearer)
    throw new ApiError('UNAUTHORIZED', 'an upload token or API key is required (Authorization: Bearer …)');
  if (looksLikeUploadToken(bearer)) return context.datasets.service.openWithToken(datasetId, bearer);
  const principal = await context.keys.resolve(header);
  request.principal = principal;
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

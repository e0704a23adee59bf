import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { GpuPrices, SetGpuPricesBody } from '../clusters/clusters.schemas.ts';
import { requireOperator } from './operator.ts';

const PRICES =
  "The operator price table: USD per GPU-hour by GPU type. A cluster's hourly_rate is the price of its " +
  'gpu_type × gpu_count, fixed when it is placed (a price change applies to later placements and starts). ' +
  'A type without a price is billed at 0. The table can also be set at start-up from the JSON file named by ' +
  'ANVIL_GPU_PRICES_FILE ({"H100": 2.49, ...}), which then wins over earlier changes made here. Owners and ' +
  "admins of the operators' account only.";

/** GET/PUT /v2/admin/gpu-prices. */
export const gpuPriceRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  app.addHook('onRequest', requireOperator(context));
  const tags = ['admin'];
  const config = { scope: 'billing' as const };
  const prices = context.clusters.prices;

  app.get(
    '/v2/admin/gpu-prices',
    {
      config,
      schema: {
        tags,
        summary: 'The GPU price table',
        description: PRICES,
        response: { 200: GpuPrices, ...flatErrors(401, 403, 429) },
      },
    },
    async () => ({ prices: await prices.list() }),
  );

  app.put(
    '/v2/admin/gpu-prices',
    {
      config,
      schema: {
        tags,
        summary: 'Set GPU prices (types not named keep theirs)',
        description: PRICES,
        body: SetGpuPricesBody,
        response: { 200: GpuPrices, ...flatErrors(400, 401, 403, 413, 429) },
      },
    },
    async (request) => ({ prices: await prices.set(request.body.prices) }),
  );
};

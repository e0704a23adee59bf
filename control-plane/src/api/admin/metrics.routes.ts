import { timingSafeEqual } from 'node:crypto';
import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../../context.ts';
import type { ControlPlaneMetrics } from '../../fleet/telemetry/prometheus.ts';

function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Prometheus text exposition at /metrics, for operators' monitoring. It exists only when
 * ANVIL_METRICS_TOKEN is set (otherwise 404, as any unknown path) and then answers only
 * `Authorization: Bearer <token>`: API keys do not reach it, and the token reaches nothing else.
 */
export const metricsRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  app.get('/metrics', { config: { public: true }, schema: { hide: true } }, async (request, reply) => {
    const token = context.config.metricsToken;
    if (token === null) {
      throw new ApiError('NOT_FOUND', `no route ${request.method} /metrics`, {
        method: request.method,
        path: '/metrics',
      });
    }
    const header = request.headers.authorization ?? '';
    const given = header.startsWith('Bearer ') ? header.slice(7).trim() : '';
    if (!sameSecret(given, token)) {
      throw new ApiError('UNAUTHORIZED', 'send "Authorization: Bearer <ANVIL_METRICS_TOKEN>"', {
        reason: given === '' ? 'missing' : 'invalid',
      });
    }
    const { contentType, body } = await context.fleet.metrics.render();
    return reply.type(contentType).send(body);
  });
};

/** Counts every answered request by method, route pattern (not the raw URL) and status. */
export function installHttpMetrics(app: FastifyInstance, metrics: ControlPlaneMetrics): void {
  app.addHook('onResponse', (request, reply, done) => {
    metrics.httpRequests.inc({
      method: request.method,
      route: request.routeOptions.url ?? 'unmatched',
      status: String(reply.statusCode),
    });
    done();
  });
}

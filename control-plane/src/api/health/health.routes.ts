import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';

const Health = Type.Object({
  status: Type.String(),
  checks: Type.Optional(Type.Record(Type.String(), Type.String())),
});

export const healthRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  app.get(
    '/healthz',
    {
      config: { public: true },
      schema: { tags: ['health'], summary: 'Liveness: the process is up', response: { 200: Health } },
    },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      config: { public: true },
      schema: {
        tags: ['health'],
        summary: 'Readiness: the database answers and the process is not shutting down',
        response: { 200: Health, 503: Health },
      },
    },
    async (_request, reply) => {
      if (!context.ready)
        return reply.code(503).send({ status: 'unavailable', checks: { process: 'shutting down' } });
      try {
        await context.db.sql.query('SELECT 1');
      } catch {
        return reply.code(503).send({ status: 'unavailable', checks: { database: 'unreachable' } });
      }
      return { status: 'ok', checks: { database: 'ok' } };
    },
  );
};

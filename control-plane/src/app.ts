import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { apiKeyRoutes } from './api/auth/api-keys.routes.ts';
import { healthRoutes } from './api/health/routes.ts';
import type { AppContext } from './context.ts';
import { installAuthentication } from './http/authorize.ts';
import { installErrorHandling } from './http/error-handler.ts';
import { installOpenApi } from './http/openapi.ts';
import { requestIdFor } from './http/request-id.ts';
import { buildValidator } from './http/validation.ts';

export interface BuildAppOptions {
  context: AppContext;
  logger: Logger;
}

/** Builds the HTTP API. Load order: conventions (errors, auth, docs), then one plugin per area. */
export async function buildApp({ context, logger }: BuildAppOptions) {
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    genReqId: requestIdFor,
    requestIdLogLabel: 'request_id',
    bodyLimit: context.config.bodyLimitBytes,
    // Explicit timeouts: a slow or stuck client cannot hold a socket forever.
    connectionTimeout: 0,
    requestTimeout: 120_000,
    keepAliveTimeout: 72_000,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    schemaController: { compilersFactory: { buildValidator: buildValidator as never } },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  // A POST without a body means "no options": validate it as {} so required fields are named in the error.
  app.addHook('preValidation', async (request) => {
    if (request.body === undefined && request.routeOptions.schema?.body) request.body = {};
  });

  // Only JSON (and, where a route adds it, multipart) bodies are accepted: anything else is 415.
  app.removeContentTypeParser('text/plain');
  installErrorHandling(app);
  installAuthentication(app, context.keys);
  await installOpenApi(app);

  await app.register(healthRoutes, { context });
  await app.register(apiKeyRoutes, { context });

  return app;
}

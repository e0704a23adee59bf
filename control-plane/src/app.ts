import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyBaseLogger, LogController } from 'fastify';
import { accountRoutes } from './api/accounts/index.ts';
import { sshKeyRoutes } from './api/accounts/ssh-keys.routes.ts';
import { adminAccountRoutes } from './api/admin/accounts.routes.ts';
import { adminAgentVersionRoutes } from './api/admin/agent-versions.routes.ts';
import { adminClusterRoutes } from './api/admin/clusters.routes.ts';
import { gpuPriceRoutes } from './api/admin/gpu-prices.routes.ts';
import { adminHostHistoryRoutes } from './api/admin/host-history.routes.ts';
import { adminHostRoutes } from './api/admin/hosts.routes.ts';
import { installHttpMetrics, metricsRoutes } from './api/admin/metrics.routes.ts';
import { agentDownloadRoutes } from './api/agent-downloads/agent-downloads.routes.ts';
import { agentArtifactRoutes } from './api/agent-downloads/artifacts.routes.ts';
import { analyticsRoutes } from './api/analytics/analytics.routes.ts';
import { apiKeyRoutes } from './api/auth/api-keys.routes.ts';
import { rateLimitRoutes } from './api/auth/rate-limits.routes.ts';
import { clusterTelemetryRoutes } from './api/cluster-telemetry/cluster-telemetry.routes.ts';
import { clusterRoutes } from './api/clusters/clusters.routes.ts';
import { clusterSnapshotRoutes } from './api/clusters/snapshots.routes.ts';
import { datasetRoutes } from './api/datasets/datasets.routes.ts';
import { datasetUploadRoutes } from './api/datasets/upload.routes.ts';
import { endpointRoutes } from './api/endpoints/endpoints.routes.ts';
import { executionRoutes } from './api/endpoints/execution.routes.ts';
import { experimentRoutes } from './api/experiments/experiments.routes.ts';
import { healthRoutes } from './api/health/health.routes.ts';
import { proxyRoutes } from './api/proxy/proxy.routes.ts';
import { secretRoutes } from './api/secrets/secrets.routes.ts';
import { templateRoutes } from './api/templates/templates.routes.ts';
import { terminalRoutes } from './api/terminal/terminal.routes.ts';
import { trainingArtifactRoutes } from './api/training-jobs/artifacts.routes.ts';
import { adminTrainingRecipeRoutes, trainingRecipeRoutes } from './api/training-jobs/recipes.routes.ts';
import { trainingJobRoutes } from './api/training-jobs/training-jobs.routes.ts';
import { tuningRoutes } from './api/training-jobs/tune.routes.ts';
import { usageRoutes } from './api/usage/usage.routes.ts';
import { workloadLogRoutes } from './api/workload-logs/workload-logs.routes.ts';
import type { AppContext } from './context.ts';
import { dashboardRoutes } from './dashboard/routes.ts';
import { attachAgentSockets } from './fleet/agents/sockets.ts';
import { installActivityTracking } from './http/activity.ts';
import { TrustedProxies } from './http/client-address.ts';
import { frameworkErrorHandler, installErrorHandling } from './http/error-handler.ts';
import { installRequestGuard } from './http/guard.ts';
import { installOpenApi } from './http/openapi.ts';
import { requestIdFor } from './http/request-id.ts';
import { installRequestLog } from './http/request-log.ts';
import { deferredChildLogger } from './http/request-logger.ts';
import { installSensitiveGuard } from './http/sensitive.ts';
import { installTextGuard } from './http/text-guard.ts';
import { buildSerializer, buildValidator } from './http/validation.ts';
import { invitePageRoutes } from './invite-page/routes.ts';
import type { Logger } from './logger.ts';

export interface BuildAppOptions {
  context: AppContext;
  logger: Logger;
}

/** Builds the HTTP API. Load order: conventions (errors, auth, docs), then one plugin per area. */
export async function buildApp({ context, logger }: BuildAppOptions) {
  const trustedProxies = new TrustedProxies(context.config.trustedProxies);
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    genReqId: requestIdFor,
    logController: new LogController({ requestIdLogLabel: 'request_id' }),
    childLoggerFactory: deferredChildLogger,
    bodyLimit: context.config.bodyLimitBytes,
    // request.ip reads X-Forwarded-For only through hops listed in ANVIL_TRUSTED_PROXIES.
    trustProxy: (address: string) => trustedProxies.trusts(address),
    // Explicit timeouts: a slow or stuck client cannot hold a socket forever.
    connectionTimeout: 0,
    requestTimeout: 120_000,
    keepAliveTimeout: 72_000,
    return503OnClosing: true,
    frameworkErrors: frameworkErrorHandler as never,
    forceCloseConnections: 'idle',
    schemaController: {
      compilersFactory: {
        buildValidator: buildValidator as never,
        buildSerializer: buildSerializer as never,
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // A POST without a body means "no options": validate it as {} so required fields are named in the error.
  // GET and HEAD routes have no body schema: they skip the routeOptions getter, which builds an object.
  app.addHook('preValidation', (request, _reply, done) => {
    const method = request.method;
    if (
      request.body === undefined &&
      method !== 'GET' &&
      method !== 'HEAD' &&
      request.routeOptions.schema?.body
    )
      request.body = {};
    done();
  });

  // Only JSON (and, where a route adds it, multipart) bodies are accepted: anything else is 415.
  app.removeContentTypeParser('text/plain');
  installErrorHandling(app);
  // NUL and unpaired surrogates in path, query or body: 400 before anything looks them up.
  installTextGuard(app);
  // Key (401), then rate limit (429, headers on everything after), then permissions (403).
  installRequestGuard(app, context.keys, context.rateLimits, context.accounts.ipPolicy);
  // Sensitive routes (config.sensitive) need a two-factor code where two-factor applies to the caller.
  installSensitiveGuard(app, context.accounts.twoFactor.gate);
  installRequestLog(app, context.requestLog, context.clock);
  installActivityTracking(app, context.accounts.activity);
  installHttpMetrics(app, context.fleet.metrics);
  // Agents connect over WebSocket on the same server, with their tunnels and worker API relays; their
  // sockets close first on shutdown.
  attachAgentSockets(app.server, {
    connect: context.fleet.agents,
    tunnels: context.fleet.tunnels,
    workerApi: context.endpoints.workerApi,
  });
  app.addHook('preClose', () => {
    context.fleet.tunnels.closeAll();
    return context.fleet.agents.closeAll();
  });
  await installOpenApi(app);

  await app.register(healthRoutes, { context });
  await app.register(dashboardRoutes);
  await app.register(invitePageRoutes, { context });
  await app.register(apiKeyRoutes, { context });
  await app.register(accountRoutes, { context });
  await app.register(rateLimitRoutes, { context });
  await app.register(analyticsRoutes, { context });
  await app.register(adminHostRoutes, { context });
  await app.register(adminHostHistoryRoutes, { context });
  await app.register(adminAgentVersionRoutes, { context });
  await app.register(adminClusterRoutes, { context });
  await app.register(adminAccountRoutes, { context });
  await app.register(metricsRoutes, { context });
  await app.register(clusterRoutes, { context });
  await app.register(clusterSnapshotRoutes, { context });
  await app.register(gpuPriceRoutes, { context });
  await app.register(proxyRoutes, { context });
  await app.register(secretRoutes, { context });
  await app.register(clusterTelemetryRoutes, { context });
  await app.register(templateRoutes, { context });
  await app.register(usageRoutes, { context });
  await app.register(sshKeyRoutes, { context });
  await app.register(terminalRoutes, { context });
  await app.register(datasetRoutes, { context });
  await app.register(datasetUploadRoutes, { context });
  await app.register(endpointRoutes, { context });
  await app.register(executionRoutes, { context });
  await app.register(trainingJobRoutes, { context });
  await app.register(tuningRoutes, { context });
  await app.register(trainingArtifactRoutes, { context });
  await app.register(workloadLogRoutes, { context });
  await app.register(trainingRecipeRoutes, { context });
  await app.register(adminTrainingRecipeRoutes, { context });
  await app.register(experimentRoutes, { context });
  await app.register(agentDownloadRoutes, { context });
  await app.register(agentArtifactRoutes, { context });

  return app;
}

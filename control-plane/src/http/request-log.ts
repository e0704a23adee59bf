import type { FastifyInstance } from 'fastify';
import type { Clock } from '../auth/clock.ts';
import type { RequestLog } from '../usage/request-log.ts';

/**
 * Records every authenticated request (any status: 403, 404, 429 included) once its response is sent.
 * Recording only appends to a buffer: the database write happens in batches (usage/request-log.ts).
 */
export function installRequestLog(app: FastifyInstance, log: RequestLog, clock: Clock): void {
  app.addHook('onResponse', (request, reply, done) => {
    const principal = request.principal;
    if (principal) {
      log.record({
        accountId: principal.accountId,
        keyId: principal.keyId,
        method: request.method,
        route: request.routeOptions.url ?? 'unknown',
        statusCode: reply.statusCode,
        durationMs: reply.elapsedTime,
        at: clock.now().getTime(),
      });
    }
    done();
  });
}

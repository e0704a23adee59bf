import type { FastifyInstance } from 'fastify';
import type { ActivityTracker } from '../accounts/activity.ts';

/**
 * Notes every authenticated request that reached its handler in the member's activity (last active
 * time; a request after 30 minutes of silence counts as a login). A failure here is logged, never
 * turned into a failed request.
 */
export function installActivityTracking(app: FastifyInstance, activity: ActivityTracker): void {
  // A callback hook: most requests find the member's activity fresh and need no promise.
  app.addHook('preHandler', (request, _reply, done) => {
    const principal = request.principal;
    if (!principal || !activity.needsTouch(principal.userId)) {
      done();
      return;
    }
    activity
      .touch(principal.accountId, principal.userId)
      .catch((error) => request.log.warn({ err: error }, 'recording member activity failed'))
      .finally(() => done());
  });
}

import type { FastifyInstance } from 'fastify';
import type { ActivityTracker } from '../accounts/activity.ts';

/**
 * Notes every authenticated request that reached its handler in the member's activity (last active
 * time; a request after 30 minutes of silence counts as a login). A failure here is logged, never
 * turned into a failed request.
 */
export function installActivityTracking(app: FastifyInstance, activity: ActivityTracker): void {
  app.addHook('preHandler', async (request) => {
    const principal = request.principal;
    if (!principal) return;
    try {
      await activity.touch(principal.accountId, principal.userId);
    } catch (error) {
      request.log.warn({ err: error }, 'recording member activity failed');
    }
  });
}

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.ts';
import { permissionRoutes } from './permissions.routes.ts';
import { profileRoutes } from './profile.routes.ts';
import { settingsRoutes } from './settings.routes.ts';
import { teamRoutes } from './team.routes.ts';
import { twoFactorRoutes } from './two-factor.routes.ts';

/** /v2/accounts: profile, team, roles and permissions, settings. */
export const accountRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  await app.register(profileRoutes, { context });
  await app.register(teamRoutes, { context });
  await app.register(permissionRoutes, { context });
  await app.register(settingsRoutes, { context });
  await app.register(twoFactorRoutes, { context });
};

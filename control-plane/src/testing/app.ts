import type { Logger } from 'pino';
import { buildApp } from '../app.ts';
import { bootstrapOwner } from '../auth/bootstrap.ts';
import type { Clock } from '../auth/clock.ts';
import { type Config, loadConfig } from '../config.ts';
import { type AppContext, type ContextSeams, createContext } from '../context.ts';
import { createLogger } from '../logger.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';

export interface TestApp {
  app: Awaited<ReturnType<typeof buildApp>>;
  context: AppContext;
  database: TestDatabase;
  ownerKey: string;
  accountId: string;
  userId: string;
  /** Authorization header for a key. */
  auth(key?: string): { authorization: string };
  close(): Promise<void>;
}

export function testLogger(): Logger {
  return createLogger((process.env['ANVIL_TEST_LOG_LEVEL'] as 'silent' | undefined) ?? 'silent');
}

/** The app over a fresh migrated database, with a bootstrapped owner, for `app.inject` tests. */
export async function createTestApp(
  options: {
    clock?: Clock;
    env?: Record<string, string>;
    database?: TestDatabase;
    /** Logger of the app and its context (default: silent unless ANVIL_TEST_LOG_LEVEL says otherwise). */
    logger?: Logger;
    /** Named test doubles wired into the context at construction (the proxy's tunnels). */
    seams?: ContextSeams;
    /** Registers extra routes (test-only fixtures) before the app is sealed. */
    extend?: (app: TestApp['app']) => void | Promise<void>;
  } = {},
): Promise<TestApp> {
  const database = options.database ?? (await createTestDatabase());
  const config: Config = loadConfig({ ANVIL_DATA_DIR: '/tmp/anvil-test-unused', ...options.env });
  const boot = await bootstrapOwner(database.db, { ownerEmail: config.ownerEmail, bootstrapApiKey: null });
  const logger = options.logger ?? testLogger();
  const context = createContext(config, database.db, options.clock, options.logger, options.seams);
  await context.start();
  const app = await buildApp({ context, logger });
  await options.extend?.(app);
  await app.ready();
  return {
    app,
    context,
    database,
    ownerKey: boot.generatedKey!,
    accountId: boot.accountId,
    userId: boot.userId,
    auth(key) {
      return { authorization: `Bearer ${key ?? boot.generatedKey}` };
    },
    async close() {
      await app.close();
      await context.stop();
      await database.drop();
    },
  };
}

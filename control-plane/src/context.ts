import pino, { type Logger } from 'pino';
import { type AccountServices, createAccountServices } from './accounts/index.ts';
import { ApiKeyService } from './auth/api-keys.ts';
import { type Clock, systemClock } from './auth/clock.ts';
import { KeyResolver } from './auth/key-resolver.ts';
import type { Config } from './config.ts';
import type { Database } from './db/index.ts';
import { createFleet, type Fleet } from './hosts/fleet.ts';
import { RateLimitService } from './ratelimit/service.ts';
import { ApiUsageService } from './usage/api-usage.ts';
import { RequestLog } from './usage/request-log.ts';

/** The domain services the HTTP layer calls; built once per process, started and stopped with it. */
export interface AppContext {
  config: Config;
  db: Database;
  clock: Clock;
  keys: KeyResolver;
  apiKeys: ApiKeyService;
  rateLimits: RateLimitService;
  requestLog: RequestLog;
  apiUsage: ApiUsageService;
  /** Profile, team, roles and permissions, settings; `accounts.access` decides what members may do. */
  accounts: AccountServices;
  /** Host fleet: join tokens, hosts, workloads, agent gateway, telemetry, Prometheus metrics. */
  fleet: Fleet;
  /** False once shutdown has begun: /readyz then answers 503 so load balancers drain this process. */
  ready: boolean;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createContext(
  config: Config,
  db: Database,
  clock: Clock = systemClock,
  logger: Logger = pino({ level: 'silent' }),
): AppContext {
  const keys = new KeyResolver({ db, clock });
  const apiKeys = new ApiKeyService(db, clock, keys);
  const requestLog = new RequestLog({ sql: db.sql, clock });
  const context: AppContext = {
    config,
    db,
    clock,
    keys,
    apiKeys,
    rateLimits: new RateLimitService({ db, clock }),
    requestLog,
    apiUsage: new ApiUsageService(db.sql, clock, requestLog),
    accounts: createAccountServices({ config, db, clock, keys, apiKeys, logger }),
    fleet: createFleet(config, db, clock),
    ready: false,
    async start() {
      await keys.start();
      await context.rateLimits.start();
      requestLog.start();
      await context.accounts.start();
      context.fleet.useLogger(logger.child({ component: 'fleet' }));
      await context.fleet.start();
      context.ready = true;
    },
    async stop() {
      context.ready = false;
      await context.fleet.stop();
      await keys.stop();
      await context.rateLimits.stop();
      await requestLog.stop();
      await context.accounts.stop();
    },
  };
  return context;
}

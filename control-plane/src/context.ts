import { ApiKeyService } from './auth/api-keys.ts';
import { type Clock, systemClock } from './auth/clock.ts';
import { KeyResolver } from './auth/key-resolver.ts';
import type { Config } from './config.ts';
import type { Database } from './db/index.ts';

/** The domain services the HTTP layer calls; built once per process, started and stopped with it. */
export interface AppContext {
  config: Config;
  db: Database;
  clock: Clock;
  keys: KeyResolver;
  apiKeys: ApiKeyService;
  /** False once shutdown has begun: /readyz then answers 503 so load balancers drain this process. */
  ready: boolean;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createContext(config: Config, db: Database, clock: Clock = systemClock): AppContext {
  const keys = new KeyResolver({ db, clock });
  const context: AppContext = {
    config,
    db,
    clock,
    keys,
    apiKeys: new ApiKeyService(db, clock, keys),
    ready: false,
    async start() {
      await keys.start();
      context.ready = true;
    },
    async stop() {
      context.ready = false;
      await keys.stop();
    },
  };
  return context;
}

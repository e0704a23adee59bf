export { buildApp } from './app.ts';
export { type Config, ConfigError, loadConfig } from './config.ts';
export { type AppContext, createContext } from './context.ts';
export * from './db/index.ts';
export { createLogger } from './logger.ts';
export { CONTROL_PLANE_NODE_FLAGS } from './node-flags.ts';
export { type RunningServer, startServer } from './server.ts';

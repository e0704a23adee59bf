export { buildApp } from './app.ts';
export { type Config, ConfigError, loadConfig } from './config.ts';
export { type AppContext, createContext } from './context.ts';
export * from './db/index.ts';
export { createLogger } from './logger.ts';
export { type RunningServer, startServer } from './server.ts';

import { ConfigError, loadConfig } from './config.ts';
import { createLogger } from './logger.ts';
import { missingNodeFlags } from './node-flags.ts';
import { startServer } from './server.ts';

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`anvil: ${error.message}\n`);
      process.exit(78); // EX_CONFIG
    }
    throw error;
  }
  const logger = createLogger(config.logLevel);
  const missing = missingNodeFlags();
  if (missing.length > 0) {
    logger.warn(
      { missing_node_flags: missing },
      'started without the V8 flags npm start passes (control-plane/src/node-flags.ts): expect longer garbage-collection pauses under load',
    );
  }
  const server = await startServer(config, logger);

  const shutdown = (signal: string) => {
    logger.info({ signal }, 'shutting down');
    server.close().then(
      () => {
        logger.info('stopped');
        process.exit(0);
      },
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

main().catch((error: unknown) => {
  process.stderr.write(`anvil: start-up failed: ${(error as Error).message}\n`);
  process.exit(1);
});

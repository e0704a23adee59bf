import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp } from './app.ts';
import { bootstrapOwner } from './auth/bootstrap.ts';
import type { Config } from './config.ts';
import { type AppContext, type ContextSeams, createContext } from './context.ts';
import { openMigratedDatabase } from './db/index.ts';
import { type LocalAgent, startLocalAgent } from './fleet/agents/local-agent.ts';

export interface RunningServer {
  app: FastifyInstance;
  context: AppContext;
  url: string;
  /** Graceful stop: refuse new connections, finish in-flight requests, then close the database. */
  close(): Promise<void>;
}

export async function startServer(
  config: Config,
  logger: Logger,
  out: NodeJS.WritableStream = process.stdout,
  seams: ContextSeams = {},
): Promise<RunningServer> {
  const db = await openMigratedDatabase(config);
  logger.info({ database: db.kind }, 'database migrated');
  const boot = await bootstrapOwner(db, config);
  if (boot.created) {
    logger.info(
      { account_id: boot.accountId, user_id: boot.userId, email: config.ownerEmail },
      'owner account created',
    );
    if (boot.generatedKey) {
      // The one and only time this value exists outside the caller's hands: stdout, not the log.
      out.write(`\nOwner API key (shown once, store it now):\n  ${boot.generatedKey}\n\n`);
    }
  }

  const context = createContext(config, db, undefined, logger, seams);
  const secretKey = context.accounts.secretKeySource();
  if (secretKey.source !== 'config') {
    logger.warn(
      { path: secretKey.path, generated: secretKey.source === 'generated' },
      'ANVIL_SECRET_KEY is not set: stored secrets are sealed with the key in this file. Set ANVIL_SECRET_KEY ' +
        '(32 bytes, hex or base64) in production, the same on every replica.',
    );
  }
  await context.start();
  const app = await buildApp({ context, logger });
  const url = await app.listen({ port: config.port, host: config.host });
  // The HTTPS port proxy (ANVIL_PROXY_PORT) lives and dies with the process, after the API is up.
  await context.proxy.start();
  // The SSH relay (ANVIL_SSH_PORT) likewise.
  await context.ssh.listen(config.sshPort, config.host);
  // Said once everything listens (API, proxy, SSH relay): supervisors and tests take it as "ready".
  // The replica id is what hosts' connected_replica_id names: it tells operators which process holds an agent.
  logger.info({ url, replica: context.fleet.agents.replicaId }, 'control plane listening');
  const localAgent: LocalAgent | null = config.localAgent
    ? await startLocalAgent({
        dataDir: config.dataDir,
        logLevel: config.logLevel,
        joinTokens: context.fleet.joinTokens,
        address: app.server.address(),
        logger: logger.child({ component: 'local-agent' }),
        out,
      })
    : null;

  let closing: Promise<void> | null = null;
  return {
    app,
    context,
    url,
    close() {
      closing ??= (async () => {
        context.ready = false;
        // Draining: /readyz says 503 while requests are still served, until the balancer has noticed.
        if (config.shutdownDrainMs > 0) {
          logger.info({ drainMs: config.shutdownDrainMs }, 'draining before shutdown');
          await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
        }
        // The local agent goes first, so it says goodbye on a connection that is still served.
        await localAgent?.stop();
        await context.proxy.stop(config.shutdownTimeoutMs);
        // SSH sessions end with the process: their clients see the connection close.
        await context.ssh.close();
        const force = setTimeout(() => app.server.closeAllConnections(), config.shutdownTimeoutMs);
        force.unref();
        await app.close();
        clearTimeout(force);
        await context.stop();
        await db.close();
      })();
      return closing;
    },
  };
}

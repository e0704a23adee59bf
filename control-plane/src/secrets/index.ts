import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import { ClusterAccess } from '../clusters/access.ts';
import type { Config } from '../config.ts';
import type { Database } from '../db/index.ts';
import type { ContainerStateListener, SpecResolver } from '../fleet/workloads/workloads.ts';
import type { Logger } from '../logger.ts';
import { secretInjectionCounter, secretSpecResolver } from './injection.ts';
import { SecretService } from './secrets.ts';

export { SecretService } from './secrets.ts';

/**
 * Cluster secrets: the service, re-sealing at start-up, and what the fleet's workloads take from it
 * (built before the fleet): the spec resolver that injects them, and the listener that counts injections.
 */
export function createSecrets(deps: {
  config: Pick<Config, 'previousSecretKeys'>;
  db: Database;
  clock: Clock;
  accounts: AccountServices;
  logger: Logger;
}): {
  service: SecretService;
  specResolver: SpecResolver;
  injectionCounter: ContainerStateListener;
  start(): Promise<void>;
} {
  const { config, db, clock, accounts, logger } = deps;
  const service = new SecretService({
    db,
    clock,
    access: accounts.access,
    audit: accounts.audit,
    clusters: new ClusterAccess(db, accounts.access),
    box: () => accounts.secrets(),
  });
  return {
    service,
    specResolver: secretSpecResolver(service, logger),
    injectionCounter: secretInjectionCounter(service, logger),
    async start() {
      // Values sealed under a key now in ANVIL_SECRET_KEY_PREVIOUS move to the current key.
      if (config.previousSecretKeys.length === 0) return;
      const resealed = await service.reseal();
      if (resealed > 0) logger.info({ secrets: resealed }, 'cluster secrets re-sealed under the current key');
    },
  };
}

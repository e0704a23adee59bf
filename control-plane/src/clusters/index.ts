import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import { PriceTable } from '../billing/prices.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import { type Logger, silentLogger } from '../logger.ts';
import { Allocator } from '../scheduler/allocator.ts';
import { Signal } from '../util/signal.ts';
import { ClusterCreation } from './creation.ts';
import { type FailedGpuPolicy, FailedGpuWorkloads } from './failed-gpus.ts';
import { ClusterOperations } from './operations.ts';
import type { TemplateResolverLike } from './requests.ts';
import { ClusterService } from './service.ts';
import { ClusterSnapshots } from './snapshot-catalog.ts';
import { ClusterSupervisor, type SupervisorOptions } from './supervisor.ts';
import type { ClusterViewParts } from './view-parts.ts';

/** Clusters, their scheduler and billing: built once per process, started and stopped with it. */
export interface Clusters {
  service: ClusterService;
  operations: ClusterOperations;
  supervisor: ClusterSupervisor;
  /** The snapshots of a cluster on its host: list and delete (GET/DELETE /v1/clusters/{id}/snapshots). */
  snapshots: ClusterSnapshots;
  allocator: Allocator;
  prices: PriceTable;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createClusters(deps: {
  db: Database;
  clock: Clock;
  fleet: Fleet;
  accounts: AccountServices;
  /** ANVIL_GPU_PRICES_FILE: applied at start. */
  pricesFile?: string | null;
  /** ANVIL_FAILED_GPU_POLICY: what happens to clusters on a GPU that failed (default keep). */
  failedGpuPolicy?: FailedGpuPolicy;
  templates?: TemplateResolverLike | null;
  parts?: ClusterViewParts;
  supervisor?: SupervisorOptions;
  logger?: Logger;
}): Clusters {
  const logger = deps.logger ?? silentLogger;
  // The service and operations change clusters; the supervisor, built after them, acts on the change now.
  const changed = new Signal();
  const allocator = new Allocator(deps.db, deps.clock);
  const service = new ClusterService({
    ...deps,
    allocator,
    creation: new ClusterCreation(deps.db),
    logger,
    changed,
  });
  const operations = new ClusterOperations({
    ...deps,
    allocator,
    logger,
    freed: () => changed.notify(),
  });
  const running = new ClusterSupervisor(
    { db: deps.db, clock: deps.clock, service, operations, allocator, logger },
    deps.supervisor,
  );
  changed.listen(() => running.kick());
  // The agent reports a cluster container's change (running, exited, gone) as it happens: a container
  // now running makes its starting cluster running at once, and the supervisor acts on any other change
  // now instead of at its next timed pass (errors, stop phases waiting for the exit).
  const unsubscribe = deps.fleet.workloads.onContainerState(async ({ hostId, workloadId }, change) => {
    if (!workloadId.startsWith('cluster_')) return;
    if (change.phase === 'running') await running.markRunning(workloadId, hostId);
    running.kick();
  });
  // A GPU whose health turned failed: its clusters are told why, and stopped if the policy says so.
  const failedGpus = new FailedGpuWorkloads({
    db: deps.db,
    clock: deps.clock,
    policy: deps.failedGpuPolicy ?? 'keep',
    failCluster: (clusterId, reason) => service.fail(clusterId, reason),
    freed: () => changed.notify(),
  });
  const unsubscribeGpuHealth = deps.fleet.events.onGpuHealthChanged((change) =>
    failedGpus.handle(change).catch((error: unknown) => {
      logger.error(
        { err: error, hostId: change.hostId, gpuIndex: change.gpuIndex },
        'acting on a GPU health change failed',
      );
    }),
  );
  const prices = new PriceTable(deps.db, deps.clock);
  return {
    service,
    operations,
    snapshots: new ClusterSnapshots({ access: service.access, fleet: deps.fleet }),
    supervisor: running,
    allocator,
    prices,
    async start() {
      if (deps.pricesFile) await prices.loadFile(deps.pricesFile);
      await allocator.sync();
      running.start();
    },
    async stop() {
      unsubscribe();
      unsubscribeGpuHealth();
      await running.stop();
    },
  };
}

import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import { type Logger, silentLogger } from '../logger.ts';
import type { TemplateResolver } from '../templates/resolve.ts';
import { Signal } from '../util/signal.ts';
import { Dispatcher, type DispatcherOptions } from './dispatcher.ts';
import { ExecutionService } from './execution.ts';
import { EndpointHealth } from './health.ts';
import { JobQueue } from './jobs.ts';
import { QueueMaintenance } from './maintenance.ts';
import { EndpointMetrics } from './prometheus.ts';
import { RunpodBridge } from './runpod/bridge.ts';
import type { WorkerTokens } from './runpod/tokens.ts';
import { RunpodWorkerApi } from './runpod/worker-api.ts';
import { EndpointService } from './service.ts';
import { EndpointSupervisor, type SupervisorOptions } from './supervisor.ts';
import { WorkerClient } from './worker-client.ts';
import { WorkerPlacer } from './workers.ts';

/** Serverless endpoints: configuration, workers, the durable job queue and its dispatcher, health. */
export interface Endpoints {
  service: EndpointService;
  execution: ExecutionService;
  health: EndpointHealth;
  jobs: JobQueue;
  dispatcher: Dispatcher;
  supervisor: EndpointSupervisor;
  maintenance: QueueMaintenance;
  /** The worker side of the RunPod protocol, reached through the agents (AGENT_WORKER_API_PATH). */
  workerApi: RunpodWorkerApi;
  /** Per-endpoint gauges on /metrics (the fleet's registry), read at each scrape. */
  metrics: EndpointMetrics;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface EndpointsOptions {
  supervisor?: SupervisorOptions;
  dispatcher?: DispatcherOptions;
  maintenanceMs?: number;
  /** How long the worker API holds a job-take or job-stop open with nothing to hand out. */
  workerApiHoldMs?: number;
}

export function createEndpoints(deps: {
  db: Database;
  clock: Clock;
  fleet: Fleet;
  accounts: AccountServices;
  templates: TemplateResolver | null;
  syncCapacity: () => Promise<void>;
  publicUrl: string;
  allowPrivateWebhooks: boolean;
  /** The worker API tokens (the same HMAC the spec resolver puts in each worker's environment). */
  workerTokens: WorkerTokens;
  options?: EndpointsOptions;
  logger?: Logger;
}): Endpoints {
  const logger = deps.logger ?? silentLogger;
  const { db, clock, fleet } = deps;
  // Made before the dispatcher and the supervisor, which are built after the parts that notify them.
  /** A take opened (a RunPod-protocol worker asks for jobs): the dispatcher looks at once. */
  const takeOpened = new Signal();
  /** Endpoints or workers changed (created, deleted, a worker ready): the supervisor and dispatcher act now. */
  const changed = new Signal();
  /** A worker failed to take a job in a way that suggests it is broken: the supervisor checks it. */
  const workerTrouble = new Signal<string>();
  const jobs = new JobQueue(db, clock);
  const client = new WorkerClient(() => fleet.tunnels);
  const placer = new WorkerPlacer(db, clock, fleet);
  const runpod = new RunpodBridge(() => takeOpened.notify());
  const dispatcher = new Dispatcher(
    {
      db,
      clock,
      jobs,
      client,
      runpod,
      logger,
      onWorkerTrouble: (workerId) => workerTrouble.notify(workerId),
    },
    deps.options?.dispatcher,
  );
  takeOpened.listen(() => dispatcher.kick());
  const tokens = deps.workerTokens;
  const workerApi = new RunpodWorkerApi({
    db,
    clock,
    jobs,
    bridge: runpod,
    tokens,
    hosts: fleet.hosts,
    workerReady: () => changed.notify(),
    finished: (jobId, row) => dispatcher.notifyFinished(jobId, row),
    logger,
    ...(deps.options?.workerApiHoldMs === undefined ? {} : { holdMs: deps.options.workerApiHoldMs }),
  });
  // Its gauges, on the fleet's registry, are read from the database at each scrape.
  const metrics = new EndpointMetrics(fleet.metrics.registry, db, clock);
  const running = new EndpointSupervisor(
    { db, clock, jobs, placer, client, dispatcher, logger },
    deps.options?.supervisor,
  );
  changed.listen(() => {
    running.kick();
    dispatcher.kick();
  });
  workerTrouble.listen((workerId) => running.suspect(workerId));
  const service = new EndpointService({
    db,
    clock,
    accounts: deps.accounts,
    templates: deps.templates,
    jobs,
    placer,
    syncCapacity: deps.syncCapacity,
    publicUrl: deps.publicUrl,
    logger,
    changed,
  });
  const execution = new ExecutionService({
    db,
    clock,
    accounts: deps.accounts,
    endpoints: service,
    jobs,
    dispatcher,
    kickSupervisor: () => running.kick(),
    allowPrivateWebhooks: deps.allowPrivateWebhooks,
  });
  const finishedHere = (jobId: string) => dispatcher.notifyFinished(jobId);
  const maintenance = new QueueMaintenance(
    {
      db,
      clock,
      jobs,
      allowPrivate: deps.allowPrivateWebhooks,
      finished: finishedHere,
      requeued: () => dispatcher.kick(),
      logger,
    },
    deps.options?.maintenanceMs,
  );
  // Housekeeping sleeps until its next due time; a queue change (queued, finished, cancelled) wakes it.
  const stopWaking = dispatcher.onQueueChange(() => maintenance.wake());
  // A worker container changed (running, exited, removed): the supervisor acts now, not at its next pass.
  const unsubscribe = fleet.workloads.onContainerState(async ({ workloadId }) => {
    if (!workloadId.startsWith('cluster_')) running.kick();
  });
  return {
    service,
    execution,
    health: new EndpointHealth({ db, clock, endpoints: service, client }),
    jobs,
    dispatcher,
    supervisor: running,
    maintenance,
    workerApi,
    metrics,
    async start() {
      running.start();
      dispatcher.start();
      maintenance.start();
    },
    async stop() {
      unsubscribe();
      workerApi.close();
      stopWaking();
      await maintenance.stop();
      await running.stop();
      await dispatcher.stop();
    },
  };
}

import type { Logger } from 'pino';
import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../hosts/fleet.ts';
import type { TemplateResolver } from '../templates/resolve.ts';
import { Dispatcher, type DispatcherOptions } from './dispatcher.ts';
import { ExecutionService } from './execution.ts';
import { EndpointHealth } from './health.ts';
import { JobQueue } from './jobs.ts';
import { QueueMaintenance } from './maintenance.ts';
import { EndpointMetrics } from './prometheus.ts';
import { RunpodBridge } from './runpod/bridge.ts';
import { RUNPOD_TOKEN_ENV } from './runpod/environment.ts';
import { WorkerTokens } from './runpod/tokens.ts';
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
  useLogger(logger: Logger): void;
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
  options?: EndpointsOptions;
}): Endpoints {
  let logger: Pick<Logger, 'info' | 'warn' | 'error'> = { info() {}, warn() {}, error() {} };
  const log = () => logger;
  const { db, clock, fleet } = deps;
  const jobs = new JobQueue(db, clock);
  const client = new WorkerClient(() => fleet.tunnels);
  const placer = new WorkerPlacer(db, clock, fleet);
  let supervisor: EndpointSupervisor | null = null;
  // A take opened (a RunPod-protocol worker asks for jobs): the dispatcher looks at once.
  const runpod = new RunpodBridge(() => dispatcher.kick());
  const dispatcher: Dispatcher = new Dispatcher(
    {
      db,
      clock,
      jobs,
      client,
      runpod,
      logger: log,
      onWorkerTrouble: (workerId) => supervisor?.suspect(workerId),
    },
    deps.options?.dispatcher,
  );
  const tokens = new WorkerTokens(() => deps.accounts.secrets());
  const workerApi = new RunpodWorkerApi({
    db,
    clock,
    jobs,
    bridge: runpod,
    tokens,
    hosts: fleet.hosts,
    workerReady: () => {
      dispatcher.kick();
      supervisor?.kick();
    },
    finished: (jobId, row) => dispatcher.notifyFinished(jobId, row),
    logger: log,
    ...(deps.options?.workerApiHoldMs === undefined ? {} : { holdMs: deps.options.workerApiHoldMs }),
  });
  fleet.agents.useWorkerApiEndpoint(workerApi);
  const metrics = new EndpointMetrics(fleet.metrics.registry, db, clock);
  fleet.metrics.useCollector(() => metrics.collect());
  // A RunPod-protocol worker's token reaches its container as the spec is sent (never stored).
  fleet.workloads.useSpecResolver(async (spec, workload) =>
    workload.kind === 'endpoint_worker' && spec.workerApi
      ? { ...spec, secretEnv: { ...spec.secretEnv, [RUNPOD_TOKEN_ENV]: tokens.issue(workload.id) } }
      : spec,
  );
  supervisor = new EndpointSupervisor(
    { db, clock, jobs, placer, client, dispatcher, logger: log },
    deps.options?.supervisor,
  );
  const running = supervisor;
  const service = new EndpointService({
    db,
    clock,
    accounts: deps.accounts,
    templates: deps.templates,
    jobs,
    placer,
    syncCapacity: deps.syncCapacity,
    publicUrl: deps.publicUrl,
    logger: log,
  });
  service.onKick(() => {
    running.kick();
    dispatcher.kick();
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
      logger: log,
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
    useLogger(next) {
      logger = next;
    },
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

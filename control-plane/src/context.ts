import pino, { type Logger } from 'pino';
import { AccessRevocations, LiveSessions, SessionAccessCheck } from './access-revocation/index.ts';
import { type AccountServices, createAccountServices } from './accounts/index.ts';
import { ApiKeyService } from './auth/api-keys.ts';
import { type Clock, systemClock } from './auth/clock.ts';
import { KeyResolver } from './auth/key-resolver.ts';
import { type ClusterTelemetry, createClusterTelemetry, metricsViewPart } from './cluster-telemetry/index.ts';
import { ClusterAccess } from './clusters/access.ts';
import { type Clusters, createClusters } from './clusters/index.ts';
import type { Config } from './config.ts';
import { createDatasets, type Datasets } from './datasets/index.ts';
import type { Database } from './db/index.ts';
import { createExperiments, type ExperimentService } from './experiments/index.ts';
import { createFleet, type Fleet } from './fleet/hosts/fleet.ts';
import type { TunnelOpener } from './fleet/tunnels/types.ts';
import { registryAuthResolver } from './images/resolver.ts';
import { ProxyService, proxyViewPart } from './proxy/service.ts';
import { RateLimitService } from './ratelimit/service.ts';
import { createSecrets, type SecretService } from './secrets/index.ts';
import { createEndpoints, type Endpoints } from './serverless/index.ts';
import { WorkerTokens, workerTokenResolver } from './serverless/runpod/tokens.ts';
import { SshService, sshViewPart } from './ssh/index.ts';
import { TemplateService } from './templates/templates.ts';
import { TerminalService } from './terminal/service.ts';
import {
  agentHostFiles,
  createTrainingArtifacts,
  type TrainingArtifacts,
} from './training/artifacts/index.ts';
import { trainingSpecResolver } from './training/dataset-files.ts';
import { createTraining, type Training } from './training/index.ts';
import { ApiUsageService } from './usage/api-usage.ts';
import { RequestLog } from './usage/request-log.ts';
import { createUsageServices, type UsageServices } from './usage/service.ts';
import { StorageMeter } from './usage/storage-meter.ts';
import { TransferMeter } from './usage/transfer-meter.ts';

/** The domain services the HTTP layer calls; built once per process, started and stopped with it. */
export interface AppContext {
  config: Config;
  db: Database;
  clock: Clock;
  keys: KeyResolver;
  apiKeys: ApiKeyService;
  /** Revocations of keys, members and shares, heard by every process: open sessions that lost access end. */
  revocations: AccessRevocations;
  /** Terminals, log streams, SSH connections and proxy WebSockets: per-account limits, ended on revocation. */
  liveSessions: LiveSessions;
  rateLimits: RateLimitService;
  requestLog: RequestLog;
  apiUsage: ApiUsageService;
  /** Profile, team, roles and permissions, settings; `accounts.access` decides what members may do. */
  accounts: AccountServices;
  /** Host fleet: join tokens, hosts, workloads, agent gateway, telemetry, Prometheus metrics. */
  fleet: Fleet;
  /** Cluster secrets: sealed values, their API, and their injection into cluster containers. */
  secrets: SecretService;
  /** Cluster templates (official, seeded at start, and each account's own); resolves them for cluster creation. */
  templates: TemplateService;
  /** Usage and cost reports, usage alert rules and their scheduled evaluation (with billing.cost_alerts). */
  usage: UsageServices;
  /** Data transfer through tunnels and dataset downloads, written as usage records. */
  transfer: TransferMeter;
  /** Stored dataset bytes, written as usage records (GB-hours) each pass. */
  storage: StorageMeter;
  /** HTTPS port proxy: configuration API, gateway (started by server.ts, not by start()), health checks. */
  proxy: ProxyService;
  /** SSH keys, the SSH relay (listening only in a started server: server.ts) and `ssh_connection`. */
  ssh: SshService;
  /** Web terminal sessions (PTY shells over WebSocket, surviving reconnects for a short window). */
  terminal: TerminalService;
  /** GPU clusters: lifecycle service, scheduler (allocator), stop/delete operations, supervisor loop, GPU prices. */
  clusters: Clusters;
  /** Cluster metrics (snapshot, history, statistics, custom metrics) and logs (list, search, stream, download). */
  clusterTelemetry: ClusterTelemetry;
  /** Training datasets: stored bytes, upload tokens, multipart uploads, the processing pass. */
  datasets: Datasets;
  /** Serverless endpoints: workers placed on GPU hosts, the durable job queue, its dispatcher, health. */
  endpoints: Endpoints;
  /** Training jobs (gang-placed trainer containers, their reports, stop/resume) and hyperparameter tuning. */
  training: Training;
  /** Training artifacts and checkpoints: listed, measured and streamed from their hosts, deleted. */
  trainingArtifacts: TrainingArtifacts;
  /** Experiments and their runs (training jobs linked in), statistics, comparison and export. */
  experiments: ExperimentService;
  /** False once shutdown has begun: /readyz then answers 503 so load balancers drain this process. */
  ready: boolean;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Named test doubles a test or bench wires in at construction; production passes none. */
export interface ContextSeams {
  /** The tunnels the HTTPS proxy reaches containers through, instead of the agents' reverse tunnels. */
  proxyTunnels?: TunnelOpener;
}

export function createContext(
  config: Config,
  db: Database,
  clock: Clock = systemClock,
  logger: Logger = pino({ level: 'silent' }),
  seams: ContextSeams = {},
): AppContext {
  const keys = new KeyResolver({ db, clock, logger: logger.child({ component: 'api-keys' }) });
  const revocations = new AccessRevocations(db, logger.child({ component: 'access-revocation' }));
  const apiKeys = new ApiKeyService(db, clock, keys, revocations);
  const requestLog = new RequestLog({
    sql: db.sql,
    clock,
    logger: logger.child({ component: 'request-log' }),
  });
  const accounts = createAccountServices({ config, db, clock, keys, apiKeys, revocations, logger });
  const sessionAccess = new SessionAccessCheck(
    db,
    clock,
    new ClusterAccess(db, accounts.access),
    revocations,
  );
  const liveSessions = new LiveSessions({
    revocations,
    check: sessionAccess,
    limits: config.sessionLimits,
    logger: logger.child({ component: 'live-sessions' }),
  });
  const transfer = new TransferMeter({
    db,
    clock,
    logger: logger.child({ component: 'transfer-meter' }),
    pricePerGb: config.transferPricePerGb,
  });
  const secrets = createSecrets({
    config,
    db,
    clock,
    accounts,
    logger: logger.child({ component: 'secrets' }),
  });
  const workerTokens = new WorkerTokens(() => accounts.secrets());
  const fleet = createFleet(config, db, clock, {
    tunnelMeter: transfer,
    audit: accounts.audit,
    logger: logger.child({ component: 'fleet' }),
    // Each spec is completed as its host's desired set is sent, never stored: contract 5's secrets, the
    // owning account's registry credentials (WorkloadSpec.registryAuth), a RunPod-protocol worker's
    // token, a training worker's dataset files.
    specResolvers: [
      secrets.specResolver,
      registryAuthResolver(accounts.settings, logger.child({ component: 'images' })),
      workerTokenResolver(workerTokens),
      trainingSpecResolver(db),
    ],
  });
  fleet.workloads.onContainerState(secrets.injectionCounter);
  const storageLogger = logger.child({ component: 'storage-meter' });
  const storage = new StorageMeter({
    db,
    clock,
    pricePerGbHour: config.storagePricePerGbHour,
    intervalSeconds: config.storageMeterSeconds,
    onError: (error) => storageLogger.error({ err: error }, 'storage metering pass failed'),
  });
  const templates = new TemplateService(db, clock, accounts.access);
  const usage = createUsageServices({
    db,
    clock,
    accounts,
    intervalSeconds: config.usageAlertSeconds,
    logger: logger.child({ component: 'usage-alerts' }),
  });
  const clusterTelemetry = createClusterTelemetry({
    db,
    clock,
    retention: fleet.telemetry.retention,
    access: new ClusterAccess(db, accounts.access),
    onError: (error) => logger.error({ err: error }, 'cluster telemetry maintenance failed'),
  });
  const ssh = new SshService({
    db,
    clock,
    access: accounts.access,
    audit: accounts.audit,
    dataDir: config.dataDir,
    publicHost: config.sshHost,
    revocations,
    liveSessions,
    // The agents' reverse tunnels (contract 4).
    tunnels: fleet.tunnels,
    logger: logger.child({ component: 'ssh' }),
    ipPolicy: accounts.ipPolicy,
  });
  const proxy = new ProxyService({
    config,
    db,
    clock,
    keys,
    access: accounts.access,
    sessionAccess,
    revocations,
    liveSessions,
    // The agents' reverse tunnels (contract 4).
    tunnels: () => seams.proxyTunnels ?? fleet.tunnels,
    logger: logger.child({ component: 'proxy' }),
    ipPolicy: accounts.ipPolicy,
  });
  const clusters = createClusters({
    db,
    clock,
    fleet,
    accounts,
    templates,
    pricesFile: config.gpuPricesFile,
    failedGpuPolicy: config.failedGpuPolicy,
    // Contract 3: the cluster object's proxy_url/port_mappings, ssh_connection and metrics come from their areas.
    parts: {
      ssh: sshViewPart(ssh),
      proxy: proxyViewPart(proxy),
      metrics: metricsViewPart(clusterTelemetry.metrics),
    },
    logger: logger.child({ component: 'clusters' }),
  });
  const datasets = createDatasets({
    config,
    db,
    clock,
    access: accounts.access,
    logger: logger.child({ component: 'datasets' }),
  });
  const endpoints = createEndpoints({
    db,
    clock,
    fleet,
    accounts,
    templates,
    syncCapacity: () => clusters.allocator.sync(),
    publicUrl: config.publicUrl,
    allowPrivateWebhooks: config.outboundAllowPrivate,
    workerTokens,
    logger: logger.child({ component: 'endpoints' }),
  });
  const training = createTraining({
    db,
    clock,
    fleet,
    accounts,
    datasetStorage: datasets.storage,
    preemption: config.trainingPreemption,
    logger: logger.child({ component: 'training' }),
  });
  const trainingArtifacts = createTrainingArtifacts({
    db,
    clock,
    training: training.service,
    files: agentHostFiles({ agents: fleet.agents, tunnels: fleet.tunnels }),
    onError: (error) => logger.error({ err: error }, 'measuring training artifacts failed'),
  });
  const context: AppContext = {
    config,
    db,
    clock,
    keys,
    apiKeys,
    revocations,
    liveSessions,
    rateLimits: new RateLimitService({
      db,
      clock,
      access: accounts.access,
      audit: accounts.audit,
      logger: logger.child({ component: 'rate-limit' }),
    }),
    requestLog,
    apiUsage: new ApiUsageService(db.sql, clock, requestLog),
    accounts,
    fleet,
    secrets: secrets.service,
    templates,
    usage,
    transfer,
    storage,
    clusters,
    clusterTelemetry,
    proxy,
    ssh,
    terminal: new TerminalService({
      clusters: ssh.clusters,
      tunnels: () => fleet.tunnels,
      liveSessions,
      clock,
      logger: logger.child({ component: 'terminal' }),
    }),
    datasets,
    endpoints,
    training,
    trainingArtifacts,
    experiments: createExperiments({
      db,
      clock,
      access: accounts.access,
      logger: logger.child({ component: 'experiments' }),
    }),
    ready: false,
    async start() {
      await keys.start();
      await revocations.start();
      await context.rateLimits.start();
      requestLog.start();
      await context.accounts.start();
      await secrets.start();
      await context.templates.start();
      usage.start();
      storage.start();
      await context.fleet.start();
      await clusters.start();
      clusterTelemetry.start();
      await datasets.start();
      await endpoints.start();
      training.start();
      trainingArtifacts.start();
      context.ready = true;
    },
    async stop() {
      await usage.stop();
      await storage.stop();
      context.ready = false;
      await datasets.stop();
      await endpoints.stop();
      await training.stop();
      await trainingArtifacts.stop();
      context.terminal.closeAll();
      await context.ssh.close();
      await clusters.stop();
      clusterTelemetry.stop();
      await context.fleet.stop();
      // After the tunnels closed: their last bytes are written.
      await transfer.stop();
      await keys.stop();
      await revocations.stop();
      await context.rateLimits.stop();
      await requestLog.stop();
      await context.accounts.stop();
    },
  };
  return context;
}

import type { AuditLog } from '../../accounts/audit.ts';
import { checkoutAgentVersion } from '../../agent-artifacts/build.ts';
import { AgentArtifactStore } from '../../agent-artifacts/store.ts';
import type { Clock } from '../../auth/clock.ts';
import type { Config } from '../../config.ts';
import type { Database } from '../../db/index.ts';
import { type Logger, silentLogger } from '../../logger.ts';
import { AgentGateway, type AgentGatewayOptions } from '../agents/gateway.ts';
import { ControlPlaneMetrics } from '../telemetry/prometheus.ts';
import { MetricSeriesReader } from '../telemetry/series.ts';
import { type TelemetryOptions, TelemetryService } from '../telemetry/telemetry.ts';
import { type TunnelMeter, TunnelService } from '../tunnels/service.ts';
import { type SpecResolver, WorkloadService } from '../workloads/workloads.ts';
import { AgentVersionPolicy } from './agent-versions.ts';
import { HostEventLog } from './event-log.ts';
import { FleetEvents } from './events.ts';
import { GpuHealthService } from './gpu-health.ts';
import { HostService } from './hosts.ts';
import { JoinTokenService } from './join-tokens.ts';

/** The host fleet's services, built once per process and started and stopped with it. */
export interface Fleet {
  events: FleetEvents;
  /** Each host's timeline (joins, connections, cordons, GPU health changes). */
  hostEvents: HostEventLog;
  joinTokens: JoinTokenService;
  hosts: HostService;
  /** GPU health kept per host GPU (sticky until an operator resets it). */
  gpuHealth: GpuHealthService;
  workloads: WorkloadService;
  telemetry: TelemetryService;
  /** Stored metrics bucketed for charts. */
  metricSeries: MetricSeriesReader;
  agents: AgentGateway;
  /** Reverse tunnels into workloads' containers through their agents (TunnelOpener). */
  tunnels: TunnelService;
  /** The Prometheus registry behind /metrics. */
  metrics: ControlPlaneMetrics;
  /** Agent artifacts served to install.sh and to upgrading agents. */
  artifacts: AgentArtifactStore;
  /** Which agent version each host runs, pins, and upgrades. */
  agentVersions: AgentVersionPolicy;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface FleetOptions {
  /** Complete each workload spec as its host's desired set is sent (secrets, credentials), in order. */
  specResolvers?: readonly SpecResolver[];
  /** The fleet's logger (the gateway, tunnels, telemetry failures, agent upgrades); default silent. */
  logger?: Logger;
  telemetry?: TelemetryOptions;
  /** Meters the bytes every tunnel carries (data transfer usage). */
  tunnelMeter?: TunnelMeter;
  /** Where GPU health changes are audited (the operators' account); none: not audited. */
  audit?: AuditLog;
  gateway?: Partial<
    Pick<
      AgentGatewayOptions,
      'handshakeTimeoutMs' | 'desiredAckTimeoutMs' | 'heartbeatFlushMs' | 'livenessIntervalMs'
    >
  >;
}

export function createFleet(
  config: Pick<
    Config,
    | 'heartbeatSeconds'
    | 'hostGraceSeconds'
    | 'metricsSeconds'
    | 'metricsToken'
    | 'agentHandshakeSeconds'
    | 'agentPreAuthLimit'
    | 'hostCredentialRenewSeconds'
    | 'hostCredentialGraceSeconds'
    | 'replicaUrl'
    | 'agentArtifactsDir'
    | 'agentRuntimesDir'
    | 'agentVersion'
  >,
  db: Database,
  clock: Clock,
  options: FleetOptions = {},
): Fleet {
  const logger = options.logger ?? silentLogger;
  const events = new FleetEvents();
  const metrics = new ControlPlaneMetrics({
    processMetrics: config.metricsToken !== null,
    sources: { db, clock },
  });
  const hosts = new HostService(db, clock, events);
  const workloads = new WorkloadService(db, clock, events, options.specResolvers);
  const gpuHealth = new GpuHealthService(db, clock, events, options.audit ?? null);
  const telemetry = new TelemetryService(db, clock, metrics, {
    onError: (error, what) => logger.error({ err: error }, `${what} failed`),
    ...options.telemetry,
  });
  const agents = new AgentGateway({
    config,
    db,
    clock,
    hosts,
    gpuHealth,
    workloads,
    telemetry,
    events,
    metrics,
    logger,
    ...options.gateway,
  });
  const tunnels = new TunnelService({
    agents,
    workloads,
    hosts,
    dialUrl: config.replicaUrl,
    logger,
    ...(options.tunnelMeter ? { meter: options.tunnelMeter } : {}),
  });
  const artifacts = new AgentArtifactStore({
    dir: config.agentArtifactsDir,
    bundledVersion: checkoutAgentVersion(),
    runtimesDir: config.agentRuntimesDir,
    log: (details, message) => logger.info(details, message),
  });
  const agentVersions = new AgentVersionPolicy(db, clock, artifacts, config.agentVersion, agents, logger);
  // An agent that says hello with another version than its host should run is upgraded right away.
  events.onAgentGreeted(async (hostId) => {
    await agentVersions.reconcile(hostId);
  });
  // GPU health changes go on the host's timeline beside joins, disconnects and cordons.
  const hostEvents = new HostEventLog(db, clock);
  events.onGpuHealthChanged((change) => hostEvents.recordGpuHealth(change));
  return {
    events,
    hostEvents,
    joinTokens: new JoinTokenService(db, clock),
    hosts,
    gpuHealth,
    workloads,
    telemetry,
    metricSeries: new MetricSeriesReader(db, clock, telemetry.retention, config.metricsSeconds),
    agents,
    tunnels,
    metrics,
    artifacts,
    agentVersions,
    async start() {
      telemetry.start();
      await agents.start();
    },
    async stop() {
      // Tunnel sockets close with the agents' connections.
      tunnels.closeAll();
      await agents.stop();
      await telemetry.stop();
    },
  };
}

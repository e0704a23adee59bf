import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { ApiError, randomBase36 } from '@anvil/shared';
import { CLOSE_CODES, type CommandBody, MAX_FRAME_BYTES, RequestTimeoutError } from '@anvil/shared/protocol';
import { type WebSocket, WebSocketServer } from 'ws';
import type { Clock } from '../../auth/clock.ts';
import type { Config } from '../../config.ts';
import { type Database, soleProcess } from '../../db/index.ts';
import { type Logger, silentLogger } from '../../logger.ts';
import type { FleetEvents } from '../hosts/events.ts';
import type { GpuHealthService } from '../hosts/gpu-health.ts';
import type { HostService } from '../hosts/hosts.ts';
import type { ControlPlaneMetrics } from '../telemetry/prometheus.ts';
import type { TelemetryService } from '../telemetry/telemetry.ts';
import type { WorkloadService } from '../workloads/workloads.ts';
import { HelloAdmission } from './admission.ts';
import { AgentConnection, type ConnectionContext, type GatewaySettings } from './connection.ts';
import { type BusMessage, ReplicaBus } from './replica-bus.ts';
import { refuseUpgrade } from './sockets.ts';

/** Reported in welcome; kept equal to control-plane/package.json's version. */
export const CONTROL_PLANE_VERSION = '0.1.0';

export const DEFAULT_COMMAND_TIMEOUT_MS = 30_000;
export const DEFAULT_HANDSHAKE_SECONDS = 20;
export const DEFAULT_PREAUTH_LIMIT = 128;

export interface AgentGatewayOptions {
  config: Pick<Config, 'heartbeatSeconds' | 'hostGraceSeconds' | 'metricsSeconds'> &
    Partial<
      Pick<
        Config,
        | 'agentHandshakeSeconds'
        | 'agentPreAuthLimit'
        | 'hostCredentialRenewSeconds'
        | 'hostCredentialGraceSeconds'
      >
    >;
  db: Database;
  clock: Clock;
  hosts: HostService;
  gpuHealth: GpuHealthService;
  workloads: WorkloadService;
  telemetry: TelemetryService;
  events: FleetEvents;
  metrics: ControlPlaneMetrics;
  logger?: Logger;
  handshakeTimeoutMs?: number;
  desiredAckTimeoutMs?: number;
  /** How often heartbeats are written (in one statement for all hosts). */
  heartbeatFlushMs?: number;
  /** How often silent hosts are looked for. */
  livenessIntervalMs?: number;
  /** How long the current connection of a host has to answer a ping when another agent claims the host. */
  claimProbeMs?: number;
}

interface RelayWaiter {
  resolve(result: unknown): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

function notConnected(hostId: string): ApiError {
  return new ApiError('HOST_NOT_CONNECTED', `the agent of host ${hostId} is not connected`, { hostId });
}

/**
 * The agents' WebSocket endpoint (AGENT_CONNECT_PATH on the API's HTTP server) and everything the
 * control plane does with connected agents: heartbeats and liveness, desired-state pushes, commands
 * with replies, and the ingestion of their events. Several replicas may run over one PostgreSQL: an
 * agent is connected to one of them, and the others reach it through LISTEN/NOTIFY (ReplicaBus).
 */
export class AgentGateway {
  readonly replicaId = `cp_${randomBase36(12)}`;
  readonly #o: AgentGatewayOptions;
  readonly #settings: GatewaySettings;
  readonly #wss: WebSocketServer;
  readonly #bus: ReplicaBus;
  readonly #connections = new Set<AgentConnection>();
  /** Sockets open without a welcome yet: unauthenticated, so their number is capped. */
  readonly #unwelcomed = new Set<AgentConnection>();
  readonly #admission: HelloAdmission;
  readonly #byHost = new Map<string, AgentConnection>();
  readonly #heartbeats = new Map<string, number>();
  readonly #relayed = new Map<string, RelayWaiter>();
  readonly #timers: NodeJS.Timeout[] = [];
  readonly #unsubscribe: (() => void)[] = [];
  readonly #context: ConnectionContext;
  readonly #logger: Logger;
  #closing = false;
  #started = false;
  /** When the database is next looked at for silent hosts (checkLiveness); 0: at the first tick. */
  #livenessDueAt = 0;

  constructor(options: AgentGatewayOptions) {
    this.#o = options;
    this.#logger = options.logger ?? silentLogger;
    this.#settings = {
      heartbeatSeconds: options.config.heartbeatSeconds,
      metricsSeconds: options.config.metricsSeconds,
      // Short, since every socket without a hello is an unauthenticated stranger holding a slot, yet
      // enough for an agent on a busy machine to gather its inventory (seconds) before its hello.
      handshakeTimeoutMs:
        options.handshakeTimeoutMs ??
        (options.config.agentHandshakeSeconds ?? DEFAULT_HANDSHAKE_SECONDS) * 1000,
      desiredAckTimeoutMs: options.desiredAckTimeoutMs ?? 60_000,
      credentialRenewSeconds: options.config.hostCredentialRenewSeconds ?? 30 * 86_400,
      credentialGraceMs: (options.config.hostCredentialGraceSeconds ?? 3_600) * 1000,
      serverVersion: CONTROL_PLANE_VERSION,
    };
    // maxPayload enforces MAX_FRAME_BYTES: ws closes a larger frame's connection with 1009.
    this.#wss = new WebSocketServer({
      noServer: true,
      maxPayload: MAX_FRAME_BYTES,
      perMessageDeflate: false,
      clientTracking: false,
    });
    this.#admission = new HelloAdmission(options.config.agentPreAuthLimit ?? DEFAULT_PREAUTH_LIMIT);
    this.#bus = new ReplicaBus(options.db, this.replicaId);
    this.#context = {
      replicaId: this.replicaId,
      settings: this.#settings,
      hosts: options.hosts,
      gpuHealth: options.gpuHealth,
      workloads: options.workloads,
      telemetry: options.telemetry,
      metrics: options.metrics,
      clock: options.clock,
      logger: this.#logger,
      welcomed: (connection) => this.#welcomed(connection),
      greeted: (connection) => {
        void options.events.agentGreeted(connection.hostId!, connection.agentVersion);
      },
      disconnected: (connection) => this.#disconnected(connection),
      heartbeat: (hostId, atMs) => {
        this.#heartbeats.set(hostId, atMs);
      },
      claim: (connection, hostId) => this.#claim(connection, hostId),
    };
  }

  get connectedCount(): number {
    return this.#byHost.size;
  }

  /** True when this process holds a welcomed connection of the host. */
  isConnectedHere(hostId: string): boolean {
    return this.#byHost.get(hostId)?.isReady ?? false;
  }

  // ---- HTTP upgrade

  /** An agent's control connection (AGENT_CONNECT_PATH; agents/sockets.ts routes it here). */
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.#closing) {
      refuseUpgrade(socket, 503, 'Service Unavailable');
      return;
    }
    const retryAfter = this.#admission.retryAfter(this.#unwelcomed.size);
    if (retryAfter !== null) {
      // Refused before the upgrade: a flood of sockets that never authenticate costs no WebSocket, and
      // a reconnect wave is served at the pace hellos are welcomed (HelloAdmission).
      this.#o.metrics.agentRefusals.inc({ code: 'preauth_limit' });
      this.#logger.debug(
        { remote: request.socket.remoteAddress, limit: this.#admission.limit, retryAfter },
        'too many agent sockets without a welcome; told to come back later',
      );
      refuseUpgrade(socket, 503, 'Service Unavailable', { 'Retry-After': String(retryAfter) });
      return;
    }
    this.#wss.handleUpgrade(request, socket, head, (ws) => this.#accept(ws, request));
  }

  #accept(ws: WebSocket, request: IncomingMessage): void {
    const forwarded = request.headers['x-forwarded-for'];
    const remote =
      (typeof forwarded === 'string' ? forwarded.split(',')[0]?.trim() : undefined) ??
      request.socket.remoteAddress ??
      'unknown';
    const connection = new AgentConnection(ws, remote, this.#context);
    this.#connections.add(connection);
    this.#unwelcomed.add(connection);
    void connection.finished.then(() => {
      this.#connections.delete(connection);
      this.#unwelcomed.delete(connection);
    });
    if (this.#closing) {
      connection.refuse(
        'server_shutting_down',
        'the control plane is shutting down',
        true,
        CLOSE_CODES.refusedRetry,
      );
    }
  }

  /**
   * A hello for a host this process already holds: the newcomer replaces the current connection only
   * if that one no longer answers a ping (the same agent redialling after a network drop, its old
   * socket half-open). While it answers, the newcomer is a second agent with the same credential and
   * is refused (retryable: it takes over if the first one dies). Replacing both ways would make two
   * such agents knock each other off forever.
   */
  async #claim(connection: AgentConnection, hostId: string): Promise<boolean> {
    const current = this.#byHost.get(hostId);
    if (!current || current === connection || !current.isReady) return true;
    if (await current.probe(this.#o.claimProbeMs ?? 2_000)) return false;
    this.#logger.info(
      { hostId, connectionId: current.id },
      "the host's current connection does not answer a ping; the new connection replaces it",
    );
    return true;
  }

  async #welcomed(connection: AgentConnection): Promise<void> {
    this.#unwelcomed.delete(connection);
    this.#admission.welcomed();
    const hostId = connection.hostId!;
    const previous = this.#byHost.get(hostId);
    this.#byHost.set(hostId, connection);
    this.#countConnected();
    this.#livenessDueAt = Math.min(this.#livenessDueAt, this.#o.clock.now().getTime() + this.#graceMs());
    if (previous && previous !== connection) previous.replaced();
    await this.#publish({ t: 'connected', hostId, connectionId: connection.id });
  }

  /** anvil_agents_connected follows the connections this process holds. */
  #countConnected(): void {
    this.#o.metrics.agentsConnected.set(this.#byHost.size);
  }

  async #disconnected(connection: AgentConnection): Promise<void> {
    const hostId = connection.hostId!;
    if (this.#byHost.get(hostId) === connection) {
      this.#byHost.delete(hostId);
      this.#countConnected();
    }
    await this.#o.hosts.markDisconnected(hostId, connection.id);
  }

  async #publish(message: BusMessage): Promise<void> {
    try {
      await this.#bus.publish(message);
    } catch (error) {
      this.#logger.warn(
        { err: error, message: message.t },
        'could not notify the other control-plane processes',
      );
    }
  }

  // ---- desired state, deletion, commands

  /** Pushes the host's desired set if this process holds its connection. */
  async pushDesired(hostId: string): Promise<void> {
    await this.#byHost.get(hostId)?.pushDesired();
  }

  /** Refuses and closes the host's connection (here and, through the bus, on other processes). */
  async disconnectHost(hostId: string, reason: string): Promise<void> {
    this.#byHost.get(hostId)?.refuse('credential_invalid', reason, false, CLOSE_CODES.refusedFatal);
  }

  /**
   * Sends a command to a host's agent, wherever its connection is, and resolves with the reply's
   * result. Rejects with ApiError: HOST_NOT_FOUND, HOST_NOT_CONNECTED, AGENT_TIMEOUT (no reply within
   * `timeoutMs`) or AGENT_COMMAND_FAILED (the agent answered with an error, in `details`).
   */
  async sendCommand(
    hostId: string,
    command: CommandBody,
    timeoutMs = DEFAULT_COMMAND_TIMEOUT_MS,
  ): Promise<unknown> {
    const record = (outcome: string) => this.#o.metrics.agentCommands.inc({ command: command.name, outcome });
    try {
      const local = this.#byHost.get(hostId);
      let result: unknown;
      if (local?.isReady) {
        result = await this.#runLocal(local, command, timeoutMs);
      } else {
        const where = await this.#o.hosts.connection(hostId);
        if (!where || where.replicaId === this.replicaId) throw notConnected(hostId);
        result = await this.#relay(where.replicaId, hostId, command, timeoutMs);
      }
      record('ok');
      return result;
    } catch (error) {
      const code = error instanceof ApiError ? error.code : 'error';
      record(
        code === 'AGENT_TIMEOUT' ? 'timeout' : code === 'HOST_NOT_CONNECTED' ? 'not_connected' : 'error',
      );
      throw error;
    }
  }

  async #runLocal(connection: AgentConnection, command: CommandBody, timeoutMs: number): Promise<unknown> {
    const hostId = connection.hostId!;
    let reply: Awaited<ReturnType<AgentConnection['command']>>;
    try {
      reply = await connection.command(command, timeoutMs);
    } catch (error) {
      if (error instanceof RequestTimeoutError) {
        throw new ApiError(
          'AGENT_TIMEOUT',
          `host ${hostId} did not answer ${command.name} within ${timeoutMs} ms`,
          {
            hostId,
            command: command.name,
            timeoutMs,
          },
        );
      }
      throw notConnected(hostId);
    }
    if (!reply.ok) {
      throw new ApiError(
        'AGENT_COMMAND_FAILED',
        `host ${hostId} failed ${command.name}: ${reply.error.message}`,
        {
          hostId,
          command: command.name,
          agentError: reply.error,
        },
      );
    }
    return reply.result;
  }

  #relay(replica: string, hostId: string, command: CommandBody, timeoutMs: number): Promise<unknown> {
    const requestId = randomUUID();
    return new Promise<unknown>((resolve, reject) => {
      // A little longer than the holder's own time-out, so its AGENT_TIMEOUT arrives first.
      const timer = setTimeout(() => {
        this.#relayed.delete(requestId);
        reject(
          new ApiError(
            'AGENT_TIMEOUT',
            `host ${hostId} did not answer ${command.name} within ${timeoutMs} ms`,
            {
              hostId,
              command: command.name,
              timeoutMs,
              relayedTo: replica,
            },
          ),
        );
      }, timeoutMs + 2_000);
      timer.unref();
      this.#relayed.set(requestId, { resolve, reject, timer });
      this.#bus
        .publish({ t: 'command', to: replica, requestId, hostId, command, timeoutMs })
        .catch((error: unknown) => {
          clearTimeout(timer);
          this.#relayed.delete(requestId);
          reject(error as Error);
        });
    });
  }

  async #onBus(message: BusMessage, from: string): Promise<void> {
    switch (message.t) {
      case 'desired':
        await this.pushDesired(message.hostId);
        return;
      case 'connected': {
        const local = this.#byHost.get(message.hostId);
        if (local && local.id !== message.connectionId) {
          this.#byHost.delete(message.hostId);
          this.#countConnected();
          local.replaced();
        }
        return;
      }
      case 'deleted':
        await this.disconnectHost(message.hostId, `host ${message.hostId} was deleted`);
        return;
      case 'command': {
        const local = this.#byHost.get(message.hostId);
        let answer: BusMessage;
        try {
          if (!local?.isReady) throw notConnected(message.hostId);
          const result = await this.#runLocal(local, message.command, message.timeoutMs);
          answer = { t: 'command_result', to: from, requestId: message.requestId, ok: true, result };
        } catch (error) {
          const apiError =
            error instanceof ApiError
              ? error
              : new ApiError('AGENT_COMMAND_FAILED', (error as Error).message, { hostId: message.hostId });
          answer = {
            t: 'command_result',
            to: from,
            requestId: message.requestId,
            ok: false,
            error: { code: apiError.code, message: apiError.message, details: apiError.details ?? {} },
          };
        }
        try {
          await this.#bus.publish(answer);
        } catch {
          await this.#publish({
            t: 'command_result',
            to: answer.to,
            requestId: message.requestId,
            ok: false,
            error: {
              code: 'AGENT_COMMAND_FAILED',
              message:
                'the agent answered, but the answer is too large to relay between control-plane processes',
              details: { hostId: message.hostId },
            },
          });
        }
        return;
      }
      case 'command_result': {
        const waiter = this.#relayed.get(message.requestId);
        if (!waiter) return;
        this.#relayed.delete(message.requestId);
        clearTimeout(waiter.timer);
        if (message.ok) waiter.resolve(message.result);
        else {
          const e = message.error ?? { code: 'AGENT_COMMAND_FAILED', message: 'unknown error', details: {} };
          waiter.reject(new ApiError(e.code, e.message, e.details));
        }
        return;
      }
      default:
        return;
    }
  }

  // ---- heartbeats and liveness

  /** Writes the heartbeats received since the last flush, in one statement. */
  async flushHeartbeats(): Promise<void> {
    if (this.#heartbeats.size === 0) return;
    const beats = [...this.#heartbeats].map(([hostId, at]) => ({ hostId, at: new Date(at) }));
    this.#heartbeats.clear();
    // A host these beats make ready again can go silent from now on.
    this.#livenessDueAt = Math.min(this.#livenessDueAt, this.#o.clock.now().getTime() + this.#graceMs());
    const recovered = await this.#o.hosts.recordHeartbeats(beats);
    for (const hostId of recovered) this.#logger.info({ hostId }, 'host is ready again: heartbeats resumed');
  }

  /**
   * Closes this process's connections whose heartbeats stopped, then, once a host can have gone silent,
   * marks every host (whichever process held it) without a heartbeat within the grace period
   * unreachable, with its workloads. Returns the hosts newly marked.
   */
  #graceMs(): number {
    return this.#o.config.hostGraceSeconds * 1000;
  }

  async checkLiveness(): Promise<string[]> {
    const graceMs = this.#graceMs();
    const now = this.#o.clock.now().getTime();
    for (const connection of this.#byHost.values()) connection.checkHeartbeat(now, graceMs);
    if (now < this.#livenessDueAt) return [];
    await this.flushHeartbeats();
    const { lost, oldestBeat } = await this.#o.hosts.markUnreachable(new Date(now - graceMs));
    // No ready host can go silent before its last heartbeat + grace; a host that becomes ready after this
    // look (here or on another replica) beats at that moment, so not before now + grace either. In a sole
    // process with no host ready, a host becomes ready only through this process (a welcome, heartbeats),
    // which brings the next look forward: until then there is nothing to look for.
    if (oldestBeat === null && soleProcess(this.#o.db)) this.#livenessDueAt = Number.POSITIVE_INFINITY;
    else this.#livenessDueAt = Math.min(now, oldestBeat?.getTime() ?? now) + graceMs;
    for (const host of lost) {
      this.#o.metrics.hostsUnreachable.inc();
      this.#logger.warn(
        { hostId: host.id, host: host.name, graceSeconds: this.#o.config.hostGraceSeconds },
        'host unreachable: no heartbeat within the grace period; its workloads are marked, not stopped',
      );
    }
    return lost.map((h) => h.id);
  }

  // ---- lifecycle

  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#unsubscribe.push(
      this.#o.events.onDesiredChanged(async (hostId) => {
        // Held here, the host has no connection on another process (`connected` closed it there), and a
        // NOTIFY would cost this change a commit PostgreSQL serialises with every other NOTIFY.
        if (this.#byHost.has(hostId)) await this.pushDesired(hostId);
        else await this.#publish({ t: 'desired', hostId });
      }),
      this.#o.events.onHostDeleted(async (hostId) => {
        await Promise.all([
          this.disconnectHost(hostId, `host ${hostId} was deleted`),
          this.#publish({ t: 'deleted', hostId }),
        ]);
      }),
    );
    await this.#bus.start(
      (message, from) => {
        this.#onBus(message, from).catch((error: unknown) => {
          this.#logger.error({ err: error, message: message.t }, 'handling a bus message failed');
        });
      },
      (error) => this.#logger.warn({ err: error }, 'undecodable bus message'),
    );
    const heartbeatSeconds = this.#o.config.heartbeatSeconds;
    const graceMs = this.#o.config.hostGraceSeconds * 1000;
    const every = (ms: number, task: () => Promise<unknown>, what: string) => {
      const timer = setInterval(() => {
        task().catch((error: unknown) => this.#logger.error({ err: error }, `${what} failed`));
      }, ms);
      timer.unref();
      this.#timers.push(timer);
    };
    // Heartbeats are batched in memory and written together; with none received a flush returns at
    // once without touching the database. Half a heartbeat interval (5 s by default): last_heartbeat_at
    // serves the liveness check (which flushes first) and displays, and a flush every second made 100
    // idle hosts cost a statement a second for ten rows.
    every(
      this.#o.heartbeatFlushMs ?? (heartbeatSeconds * 1000) / 2,
      () => this.flushHeartbeats(),
      'writing heartbeats',
    );
    // Liveness stays a timer: a host goes silent without any event (its replica died, its network went),
    // so only time can tell. The timer (a quarter of the grace period, at most 5 s) checks this process's
    // sockets; the database is looked at only once a host can have gone silent (checkLiveness), about
    // once per grace period (40 s by default) rather than at every tick.
    const livenessMs = this.#o.livenessIntervalMs ?? Math.max(250, Math.min(5_000, graceMs / 4));
    let lastCheck = performance.now();
    every(
      livenessMs,
      async () => {
        // After this process itself stalled (CPU starvation, a long GC), heartbeats that arrived
        // meanwhile still wait unread in socket buffers: timers run before sockets are read. Skip one
        // round rather than declare every host silent.
        const at = performance.now();
        const stalledMs = at - lastCheck - livenessMs;
        lastCheck = at;
        if (stalledMs > Math.max(1_000, livenessMs)) {
          this.#logger.warn({ stalledMs: Math.round(stalledMs) }, 'liveness check late; skipped once');
          return;
        }
        await this.checkLiveness();
      },
      'liveness check',
    );
  }

  /** Refuses new agents and closes every connection (retryable: agents redial another replica or later). */
  async closeAll(): Promise<void> {
    this.#closing = true;
    const all = [...this.#connections];
    for (const connection of all) {
      connection.refuse(
        'server_shutting_down',
        'the control plane is shutting down',
        true,
        CLOSE_CODES.refusedRetry,
      );
    }
    await Promise.race([
      Promise.all(all.map((c) => c.finished)),
      new Promise((resolve) => setTimeout(resolve, 5_000).unref()),
    ]);
  }

  async stop(): Promise<void> {
    for (const timer of this.#timers.splice(0)) clearInterval(timer);
    for (const unsubscribe of this.#unsubscribe.splice(0)) unsubscribe();
    await this.closeAll();
    await this.flushHeartbeats().catch((error: unknown) => {
      this.#logger.warn({ err: error }, 'writing the last heartbeats failed');
    });
    await this.#bus.stop();
    for (const [id, waiter] of this.#relayed) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error('control plane stopping'));
      this.#relayed.delete(id);
    }
    this.#wss.close();
    this.#started = false;
  }
}

import { randomUUID } from 'node:crypto';
import {
  type AgentMessage,
  CLOSE_CODES,
  type CommandBody,
  type ControlPlaneMessage,
  closeReason,
  createMessage,
  type DecodeResult,
  decodeAgentMessage,
  encodeMessage,
  type MessageOf,
  PendingRequests,
  protocolMismatchReason,
  type RefusalCode,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@anvil/shared/protocol';
import { type RawData, WebSocket } from 'ws';
import type { Clock } from '../../auth/clock.ts';
import type { Logger } from '../../logger.ts';
import { type GpuHealthService, worstGpuHealth } from '../hosts/gpu-health.ts';
import type { HostService } from '../hosts/hosts.ts';
import type { ControlPlaneMetrics } from '../telemetry/prometheus.ts';
import type { TelemetryService } from '../telemetry/telemetry.ts';
import type { WorkloadService } from '../workloads/workloads.ts';
import { type HandshakeDeps, hello, logWelcomed, type Refusal, register, welcome } from './handshake.ts';
import { PlacedWorkloads } from './placed-workloads.ts';

export interface GatewaySettings {
  heartbeatSeconds: number;
  metricsSeconds: number;
  /** Time from socket open to hello before the connection is refused. */
  handshakeTimeoutMs: number;
  /** How long a desired_state waits for its reply before the wait is logged and dropped. */
  desiredAckTimeoutMs: number;
  /** Told to agents in welcome: renew the host credential once it is this old. */
  credentialRenewSeconds: number;
  /** How long a renewed-away credential keeps working. */
  credentialGraceMs: number;
  serverVersion: string;
}

/** What a connection needs from the gateway that owns it. */
export interface ConnectionContext {
  readonly replicaId: string;
  readonly settings: GatewaySettings;
  readonly hosts: HostService;
  readonly gpuHealth: GpuHealthService;
  readonly workloads: WorkloadService;
  readonly telemetry: TelemetryService;
  readonly metrics: ControlPlaneMetrics;
  readonly clock: Clock;
  logger: Logger;
  /** The connection was welcomed as `hostId`: it becomes the host's connection, replacing any other. */
  welcomed(connection: AgentConnection): Promise<void>;
  /** Welcome was sent: the agent takes commands from now on (an upgrade, when its version differs). */
  greeted(connection: AgentConnection): void;
  /** The welcomed connection closed. */
  disconnected(connection: AgentConnection): Promise<void>;
  heartbeat(hostId: string, atMs: number): void;
  /**
   * May this connection become the host's? False while another connection of the host is alive:
   * a second agent with the same credential is refused, the first one keeps its connection.
   */
  claim(connection: AgentConnection, hostId: string): Promise<boolean>;
}

export type ReplyMessage = MessageOf<'reply'>;

/** A queue this deep stops reading from the socket until it drains (the database is behind). */
const QUEUE_HIGH_WATER = 64;
const QUEUE_LOW_WATER = 16;
/** Undecodable frames tolerated from a welcomed agent per minute before it is disconnected. */
const BAD_FRAME_BUDGET = 20;
/** Time a peer gets to answer our close before its socket is destroyed. */
const CLOSE_GRACE_MS = 2_000;

type State = 'handshake' | 'ready' | 'closing' | 'closed';

/**
 * One agent WebSocket. Before hello it accepts only register (join token -> credential) and hello
 * (credential -> welcome), whose checks are handshake.ts's; after, the agent's events. Messages are
 * handled one at a time in arrival order (a state report is never overtaken by an older one); heartbeats
 * and replies skip the queue so a slow database never delays an ack. Every refusal is sent as a `refusal` message with the full
 * reason before the close, whose code says whether redialling can help.
 */
export class AgentConnection {
  readonly id = randomUUID();
  hostId: string | null = null;
  agentVersion: string | null = null;
  lastHeartbeatMs: number;
  /** Resolves once the socket is closed and the host's connection state is written. */
  readonly finished: Promise<void>;

  #state: State = 'handshake';
  #registered = false;
  #welcomed = false;
  #queue: Promise<void> = Promise.resolve();
  #queued = 0;
  #paused = false;
  readonly #pending = new PendingRequests<ReplyMessage>();
  #lastSentGeneration = -1;
  #pushing: Promise<void> | null = null;
  #pushAgain = false;
  #badFrames: number[] = [];
  /** The credential this connection's hello presented (replaced by a renewal on this connection). */
  #credential: string | null = null;
  readonly #placed = new PlacedWorkloads();
  #handshakeTimer: NodeJS.Timeout | null;
  #resolveFinished!: () => void;

  constructor(
    private readonly ws: WebSocket,
    readonly remoteAddress: string,
    private readonly ctx: ConnectionContext,
  ) {
    this.lastHeartbeatMs = ctx.clock.now().getTime();
    this.finished = new Promise((resolve) => {
      this.#resolveFinished = resolve;
    });
    this.#handshakeTimer = setTimeout(() => {
      this.refuse(
        'handshake_timeout',
        `no hello within ${ctx.settings.handshakeTimeoutMs} ms`,
        true,
        CLOSE_CODES.refusedRetry,
      );
    }, ctx.settings.handshakeTimeoutMs);
    this.#handshakeTimer.unref();
    ws.on('message', (data, isBinary) => this.#onFrame(data, isBinary));
    ws.on('error', (error) => {
      // ws reports oversize frames (maxPayload) and protocol violations here, then closes the socket.
      const code = /max payload/i.test(error.message) ? 'too_large' : 'socket_error';
      if (code === 'too_large') ctx.metrics.agentBadFrames.inc({ code });
      this.#log().warn({ err: error.message, code }, 'agent socket error');
    });
    ws.on('close', (code, reason) => this.#onClose(code, reason.toString()));
  }

  get state(): State {
    return this.#state;
  }

  get isReady(): boolean {
    return this.#state === 'ready';
  }

  #log(): Logger {
    return this.ctx.logger;
  }

  #details(extra: Record<string, unknown> = {}): Record<string, unknown> {
    return { hostId: this.hostId, connectionId: this.id, remote: this.remoteAddress, ...extra };
  }

  // ---- sending and closing

  #send(message: ControlPlaneMessage): void {
    if (this.ws.readyState !== WebSocket.OPEN)
      throw new Error(`send ${message.type}: connection is not open`);
    this.ws.send(encodeMessage(message));
  }

  /** Sends a refusal with its full reason, then closes with `closeCode`. */
  refuse(
    code: RefusalCode,
    reason: string,
    retryable: boolean,
    closeCode: number,
    answering?: string,
    supportedVersions: { min: number; max: number } | null = null,
  ): void {
    if (this.#state === 'closing' || this.#state === 'closed') return;
    this.ctx.metrics.agentRefusals.inc({ code });
    try {
      this.#send(
        createMessage(
          'refusal',
          { code, reason: reason.slice(0, 1024), retryable, supportedVersions },
          answering === undefined ? {} : { id: answering },
        ),
      );
    } catch {
      // The socket is already going; the close below still tells the peer.
    }
    this.close(closeCode, `${code}: ${reason}`);
  }

  close(code: number, reason: string): void {
    if (this.#state === 'closing' || this.#state === 'closed') return;
    this.#state = 'closing';
    this.#clearHandshakeTimer();
    try {
      this.ws.close(code, closeReason(reason));
    } catch {
      this.ws.terminate();
    }
    setTimeout(() => {
      if (this.ws.readyState !== WebSocket.CLOSED) this.ws.terminate();
    }, CLOSE_GRACE_MS).unref();
  }

  /** A newer connection of the same host took over. */
  replaced(): void {
    this.ctx.metrics.agentConnections.inc({ outcome: 'replaced' });
    this.#log().info(this.#details(), 'agent connection replaced by a newer one of the same host');
    this.close(CLOSE_CODES.replaced, 'replaced by a newer connection of the same host');
  }

  #clearHandshakeTimer(): void {
    if (this.#handshakeTimer) clearTimeout(this.#handshakeTimer);
    this.#handshakeTimer = null;
  }

  #onClose(code: number, reason: string): void {
    const wasReady = this.#state === 'ready';
    this.#state = 'closed';
    this.#clearHandshakeTimer();
    this.#pending.rejectAll(new Error('agent disconnected'));
    this.ctx.metrics.agentConnections.inc({ outcome: 'closed' });
    if (wasReady || this.#welcomed) this.#log().info(this.#details({ code, reason }), 'agent disconnected');
    else this.#log().debug(this.#details({ code, reason }), 'agent connection closed before welcome');
    // Behind whatever is still being handled, so a hello that is half done cannot mark the host
    // connected after this disconnect was recorded.
    this.#enqueue(async () => {
      if (this.#welcomed) await this.ctx.disconnected(this);
    });
    void this.#queue.then(() => this.#resolveFinished());
  }

  // ---- receiving

  #onFrame(data: RawData, isBinary: boolean): void {
    if (this.#state === 'closing' || this.#state === 'closed') return;
    const raw = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    if (isBinary) {
      this.#badFrame({
        ok: false,
        code: 'bad_envelope',
        error: 'binary frames are not part of the protocol',
        head: null,
      });
      return;
    }
    const result = decodeAgentMessage(raw);
    if (!result.ok) {
      this.#badFrame(result);
      return;
    }
    const message = result.message;
    this.ctx.metrics.agentMessages.inc({ type: message.type });
    if (this.#state === 'ready') {
      if (message.type === 'heartbeat') {
        this.#heartbeat(message);
        return;
      }
      if (message.type === 'reply') {
        if (!this.#pending.settle(message))
          this.#log().debug(this.#details({ id: message.id }), 'unsolicited reply');
        return;
      }
    }
    this.#enqueue(() => this.#handle(message));
  }

  #badFrame(result: Extract<DecodeResult<AgentMessage>, { ok: false }>): void {
    this.ctx.metrics.agentBadFrames.inc({ code: result.code });
    if (result.code === 'unsupported_version' && result.head) {
      const reason = protocolMismatchReason('agent', result.head.v);
      this.#log().warn(this.#details({ agentProtocol: result.head.v }), reason);
      this.refuse('protocol_incompatible', reason, false, CLOSE_CODES.refusedFatal, result.head.id, {
        ...SUPPORTED_PROTOCOL_VERSIONS,
      });
      return;
    }
    if (this.#state === 'handshake') {
      this.#log().warn(
        this.#details({ code: result.code, error: result.error }),
        'undecodable frame before hello',
      );
      this.refuse('bad_message', result.error, true, CLOSE_CODES.badFrame, result.head?.id);
      return;
    }
    // A welcomed agent keeps its connection over a bad frame (a newer agent's unknown message, a bug),
    // unless they keep coming.
    const now = this.ctx.clock.now().getTime();
    this.#badFrames = this.#badFrames.filter((at) => now - at < 60_000);
    this.#badFrames.push(now);
    this.#log().warn(
      this.#details({ code: result.code, error: result.error }),
      'dropped an undecodable frame',
    );
    if (this.#badFrames.length > BAD_FRAME_BUDGET) {
      this.refuse(
        'bad_message',
        `more than ${BAD_FRAME_BUDGET} undecodable frames within a minute; last: ${result.error}`,
        true,
        CLOSE_CODES.badFrame,
      );
    }
  }

  #enqueue(task: () => Promise<void>): void {
    this.#queued += 1;
    if (this.#queued > QUEUE_HIGH_WATER && !this.#paused && this.ws.readyState === WebSocket.OPEN) {
      this.ws.pause();
      this.#paused = true;
    }
    this.#queue = this.#queue
      .then(task)
      .catch((error: unknown) => {
        this.#log().error(this.#details({ err: error }), 'handling an agent message failed');
      })
      .finally(() => {
        this.#queued -= 1;
        if (this.#paused && this.#queued <= QUEUE_LOW_WATER) {
          this.#paused = false;
          if (this.ws.readyState === WebSocket.OPEN) this.ws.resume();
        }
      });
  }

  #heartbeat(message: MessageOf<'heartbeat'>): void {
    const now = this.ctx.clock.now().getTime();
    this.lastHeartbeatMs = now;
    try {
      this.#send(createMessage('heartbeat_ack', { seq: message.seq, receivedAt: now }, { id: message.id }));
    } catch {
      return;
    }
    if (this.hostId) this.ctx.heartbeat(this.hostId, now);
  }

  #requireReady(message: AgentMessage): boolean {
    if (this.#state === 'ready') return true;
    if (this.#state === 'handshake') {
      this.refuse('bad_message', `${message.type} before hello`, true, CLOSE_CODES.badFrame, message.id);
    }
    return false;
  }

  async #handle(message: AgentMessage): Promise<void> {
    if (this.#state === 'closed' || this.#state === 'closing') return;
    switch (message.type) {
      case 'register':
        return this.#register(message);
      case 'hello':
        return this.#hello(message);
      case 'heartbeat':
        // Only reaches here before welcome.
        this.#requireReady(message);
        return;
      case 'reply':
        return;
      case 'refusal':
        this.#log().error(
          this.#details({ code: message.code, reason: message.reason }),
          'agent refused the control plane',
        );
        this.close(message.retryable ? CLOSE_CODES.refusedRetry : CLOSE_CODES.refusedFatal, message.reason);
        return;
      default:
        break;
    }
    if (!this.#requireReady(message)) return;
    const hostId = this.hostId!;
    switch (message.type) {
      case 'actual_state':
        await this.ctx.workloads.recordActualState(hostId, message.generation, message.workloads);
        return;
      case 'container_state':
        await this.ctx.workloads.recordContainerState(hostId, message);
        return;
      case 'metric_batch': {
        await this.#placed.ready;
        const samples = message.samples.map((sample) => ({
          ...sample,
          containers: this.#ownOnly(sample.containers, 'metric_batch'),
        }));
        this.ctx.telemetry.ingestMetrics(hostId, samples, message.dropped);
        await this.ctx.gpuHealth.observe(hostId, worstGpuHealth(message.samples));
        return;
      }
      case 'log_batch':
        await this.#placed.ready;
        this.ctx.telemetry.ingestLogs(
          hostId,
          this.#ownOnly(message.entries, 'log_batch'),
          this.#ownOnly(message.complete ?? [], 'log_batch'),
        );
        return;
      case 'logs_dropped': {
        await this.#placed.ready;
        // A loss without a workload (the agent's own buffer) is the host's to report.
        const hostWide = message.losses.filter((l) => l.workloadId === null);
        const attributed = message.losses.flatMap((l) =>
          l.workloadId === null ? [] : [{ ...l, workloadId: l.workloadId }],
        );
        const losses = [...hostWide, ...this.#ownOnly(attributed, 'logs_dropped')];
        const lines = losses.reduce((sum, l) => sum + l.lines, 0);
        this.#log().warn(this.#details({ lines }), 'agent dropped log lines while its buffer was full');
        await this.ctx.telemetry.recordLogLosses(hostId, losses);
        return;
      }
      case 'pull_progress':
        await this.ctx.workloads.recordPullProgress(hostId, message);
        return;
      case 'inventory':
        await this.ctx.hosts.updateInventory(hostId, message.inventory);
        return;
      case 'renew_credential':
        await this.#renewCredential(hostId, message);
        return;
      default:
        return;
    }
  }

  async #renewCredential(hostId: string, message: MessageOf<'renew_credential'>): Promise<void> {
    const renewed = this.#credential
      ? await this.ctx.hosts.renewCredential(hostId, this.#credential, this.ctx.settings.credentialGraceMs)
      : null;
    if (!renewed) {
      // The credential changed under this connection (another renewal, the host deleted): start over.
      this.refuse(
        'credential_invalid',
        'the credential this connection presented can no longer be renewed; reconnect',
        true,
        CLOSE_CODES.refusedRetry,
        message.id,
      );
      return;
    }
    this.#credential = renewed.credential;
    this.#log().info(
      this.#details({ previousValidUntil: renewed.previousValidUntil.toISOString() }),
      'host credential renewed',
    );
    this.#send(
      createMessage(
        'credential_renewed',
        {
          hostId,
          credential: renewed.credential,
          issuedAt: renewed.issuedAt.getTime(),
          previousValidUntil: renewed.previousValidUntil.getTime(),
        },
        { id: message.id },
      ),
    );
  }

  /** The items of workloads placed on this host; the others are dropped, counted and logged. */
  #ownOnly<T extends { workloadId: string }>(items: T[], type: string): T[] {
    const now = this.ctx.clock.now().getTime();
    const own: T[] = [];
    const foreign = new Set<string>();
    for (const item of items) {
      if (this.#placed.has(item.workloadId, now)) own.push(item);
      else foreign.add(item.workloadId);
    }
    if (own.length < items.length) {
      this.ctx.metrics.agentBadFrames.inc({ code: 'foreign_workload' }, items.length - own.length);
      this.#log().warn(
        this.#details({ type, dropped: items.length - own.length, workloadIds: [...foreign].slice(0, 10) }),
        'agent reported workloads not placed on its host; dropped',
      );
    }
    return own;
  }

  /** The handshake's view of this connection (handshake.ts). */
  #handshake(): HandshakeDeps {
    return {
      hosts: this.ctx.hosts,
      replicaId: this.ctx.replicaId,
      connectionId: this.id,
      log: () => this.#log(),
      details: (extra) => this.#details(extra),
      claim: (hostId) => this.ctx.claim(this, hostId),
    };
  }

  #refuseWith(refusal: Refusal, answering: string): void {
    this.refuse(refusal.code, refusal.reason, refusal.retryable, refusal.closeCode, answering);
  }

  async #register(message: MessageOf<'register'>): Promise<void> {
    if (this.#state !== 'handshake' || this.#registered) {
      this.#log().warn(
        this.#details(),
        'register on a connection that already registered or said hello; ignored',
      );
      return;
    }
    const result = await register(this.#handshake(), message);
    if (!result.ok) {
      this.#refuseWith(result.refusal, message.id);
      return;
    }
    this.#registered = true;
    this.ctx.metrics.agentConnections.inc({ outcome: 'registered' });
    this.#send(result.registered);
  }

  async #hello(message: MessageOf<'hello'>): Promise<void> {
    if (this.#state !== 'handshake') {
      this.#log().warn(this.#details(), 'second hello on a welcomed connection; ignored');
      return;
    }
    const result = await hello(this.#handshake(), message);
    if (!result.ok) {
      this.#refuseWith(result.refusal, message.id);
      return;
    }
    this.hostId = result.auth.host.id;
    this.#credential = message.credential;
    this.agentVersion = message.agentVersion;
    this.#welcomed = true;
    // The socket may have closed while the database was written; the queued disconnect then follows.
    if (this.#state !== 'handshake') return;
    this.#state = 'ready';
    this.#clearHandshakeTimer();
    this.lastHeartbeatMs = this.ctx.clock.now().getTime();
    await this.ctx.welcomed(this);
    if (this.#state !== 'ready') return;
    this.#send(welcome(this.ctx.settings, this.ctx.clock.now().getTime(), result.auth, message.id));
    this.ctx.metrics.agentConnections.inc({ outcome: 'welcomed' });
    this.ctx.greeted(this);
    logWelcomed(this.#handshake(), message);
    void this.pushDesired();
  }

  // ---- control plane -> agent

  /**
   * Sends the host's current desired set if it is newer than the last one sent on this connection.
   * Calls during a push coalesce into one more push, so the newest set always goes out last.
   */
  pushDesired(): Promise<void> {
    if (this.#pushing) {
      this.#pushAgain = true;
      return this.#pushing;
    }
    this.#pushing = (async () => {
      do {
        this.#pushAgain = false;
        await this.#pushOnce();
      } while (this.#pushAgain && this.#state === 'ready');
    })()
      .catch((error: unknown) => {
        this.#log().error(this.#details({ err: error }), 'pushing the desired state failed');
      })
      .finally(() => {
        this.#pushing = null;
      });
    return this.#pushing;
  }

  async #pushOnce(): Promise<void> {
    const hostId = this.hostId;
    if (!hostId || this.#state !== 'ready') return;
    const set = await this.ctx.workloads.desiredSet(hostId).catch((error: unknown) => {
      // Ingestion waits for the first set; a failed read must not hold it forever.
      this.#placed.loaded();
      throw error;
    });
    if (set) {
      this.#placed.refresh(
        set.workloads.map((w) => w.workloadId),
        this.ctx.clock.now().getTime(),
      );
    } else {
      this.#placed.loaded();
    }
    if (!set || this.#state !== 'ready' || set.generation <= this.#lastSentGeneration) return;
    this.#lastSentGeneration = set.generation;
    const message = createMessage('desired_state', { generation: set.generation, workloads: set.workloads });
    this.#pending
      .request(message, (m) => this.#send(m), this.ctx.settings.desiredAckTimeoutMs)
      .then(
        (reply) => {
          if (reply.ok) {
            this.ctx.hosts.recordAck(hostId, set.generation).catch((error: unknown) => {
              this.#log().warn(this.#details({ err: error }), 'recording a desired-state ack failed');
            });
          } else {
            this.#log().warn(
              this.#details({ generation: set.generation, error: reply.error }),
              'agent refused the desired state',
            );
          }
        },
        (error: unknown) => {
          if (this.#state === 'ready') {
            this.#log().warn(
              this.#details({ generation: set.generation, err: (error as Error).message }),
              'desired state not acknowledged',
            );
          }
        },
      );
    this.#log().debug(
      this.#details({ generation: set.generation, workloads: set.workloads.length }),
      'desired state sent',
    );
  }

  /** A command answered by `reply`; rejects with RequestTimeoutError, or when the connection ends. */
  async command(body: CommandBody, timeoutMs: number): Promise<ReplyMessage> {
    if (this.#state !== 'ready') throw new Error('agent is not connected');
    return this.#pending.request(
      createMessage('command', { command: body }),
      (m) => this.#send(m),
      timeoutMs,
    );
  }

  /** Whether the peer still answers: a WebSocket ping answered by a pong within `timeoutMs`. */
  probe(timeoutMs: number): Promise<boolean> {
    if (this.#state !== 'ready' || this.ws.readyState !== WebSocket.OPEN) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (alive: boolean) => {
        clearTimeout(timer);
        this.ws.off('pong', onPong);
        this.ws.off('close', onClose);
        resolve(alive);
      };
      const onPong = () => done(true);
      const onClose = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      timer.unref();
      this.ws.on('pong', onPong);
      this.ws.on('close', onClose);
      try {
        this.ws.ping();
      } catch {
        done(false);
      }
    });
  }

  /** Closes the socket if heartbeats stopped for longer than `graceMs`. */
  checkHeartbeat(nowMs: number, graceMs: number): boolean {
    if (this.#state !== 'ready' || nowMs - this.lastHeartbeatMs <= graceMs) return false;
    this.#log().warn(
      this.#details({ silentMs: nowMs - this.lastHeartbeatMs }),
      'no heartbeat within the grace period; closing',
    );
    this.close(CLOSE_CODES.heartbeatTimeout, `no heartbeat within ${Math.round(graceMs / 1000)} s`);
    return true;
  }
}

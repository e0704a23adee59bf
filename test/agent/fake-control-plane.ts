import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  AGENT_CONNECT_PATH,
  type AgentMessage,
  CLOSE_CODES,
  type CommandBody,
  type ControlPlaneMessage,
  closeReason,
  createMessage,
  decodeAgentMessage,
  encodeMessage,
  type Inventory,
  MAX_FRAME_BYTES,
  type MessageOf,
  PendingRequests,
  PROTOCOL_VERSION,
  protocolMismatchReason,
  type RefusalCode,
  SUPPORTED_PROTOCOL_VERSIONS,
  type WorkloadSpec,
} from '@anvil/shared/protocol';
import { type WebSocket, WebSocketServer } from 'ws';

/**
 * A control plane for tests: a real WebSocket server speaking the real protocol (shared/protocol),
 * with join tokens, credentials, desired state, commands and a record of every message received.
 * It holds everything in memory; the real gateway stores the same things in the database.
 */
export interface FakeControlPlaneOptions {
  heartbeatSeconds?: number;
  metricsSeconds?: number;
  /** Protocol version stamped on what this fake sends: set it to play an incompatible control plane. */
  protocolVersion?: number;
}

interface HostRecord {
  hostId: string;
  credential: string;
  generation: number;
  desired: WorkloadSpec[] | null;
  socket: WebSocket | null;
  inventory: Inventory | null;
  agentVersion: string | null;
  connections: number;
  pending: PendingRequests<AgentMessage>;
}

export interface ReceivedMessage {
  hostId: string | null;
  message: AgentMessage;
}

export class FakeControlPlane {
  readonly #server: Server;
  readonly #wss: WebSocketServer;
  readonly #tokens = new Map<string, number>();
  readonly #hosts = new Map<string, HostRecord>();
  readonly #options: Required<FakeControlPlaneOptions>;
  /** Every decoded message from every agent, in arrival order. */
  readonly received: ReceivedMessage[] = [];
  /** Every refusal this fake sent (code and reason), and every one it received from agents. */
  readonly refusalsSent: { code: string; reason: string }[] = [];
  readonly refusalsReceived: MessageOf<'refusal'>[] = [];
  /** While true, hellos are refused as retryable (a control plane restarting). */
  refuseConnections = false;
  /** While false, heartbeats go unanswered (a half-dead connection). */
  ackHeartbeats = true;

  private constructor(server: Server, options: FakeControlPlaneOptions) {
    this.#server = server;
    this.#options = { heartbeatSeconds: 1, metricsSeconds: 1, protocolVersion: PROTOCOL_VERSION, ...options };
    this.#wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES });
    server.on('upgrade', (req, socket, head) => {
      if (new URL(req.url ?? '/', 'http://x').pathname !== AGENT_CONNECT_PATH) {
        socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
        return;
      }
      this.#wss.handleUpgrade(req, socket, head, (ws) => this.#accept(ws));
    });
  }

  static async start(options: FakeControlPlaneOptions = {}): Promise<FakeControlPlane> {
    const server = createServer((_req, res) => res.writeHead(404).end());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return new FakeControlPlane(server, options);
  }

  get url(): string {
    const { port } = this.#server.address() as AddressInfo;
    return `http://127.0.0.1:${port}`;
  }

  /** A join token good for `uses` registrations. */
  createJoinToken(uses = 1): string {
    const token = `jt_${randomBytes(16).toString('hex')}`;
    this.#tokens.set(token, uses);
    return token;
  }

  hostIds(): string[] {
    return [...this.#hosts.keys()];
  }

  host(hostId: string) {
    const h = this.#hosts.get(hostId);
    if (!h) throw new Error(`unknown host ${hostId}`);
    return {
      connected: h.socket !== null,
      connections: h.connections,
      inventory: h.inventory,
      agentVersion: h.agentVersion,
      generation: h.generation,
    };
  }

  /** Revoke a host's credential (the host was deleted). */
  revoke(hostId: string): void {
    const h = this.#hosts.get(hostId);
    if (!h) return;
    this.#hosts.delete(hostId);
    if (h.socket)
      this.#refuse(h.socket, 'credential_invalid', 'host was deleted; its credential is revoked', null);
  }

  /** Replace a host's desired set; sent now if connected, else on its next hello. */
  async setDesired(
    hostId: string,
    workloads: WorkloadSpec[],
    timeoutMs = 10_000,
  ): Promise<MessageOf<'reply'> | null> {
    const h = this.#hosts.get(hostId);
    if (!h) throw new Error(`unknown host ${hostId}`);
    h.generation += 1;
    h.desired = workloads;
    if (!h.socket) return null;
    return this.#sendDesired(h, timeoutMs);
  }

  async command(hostId: string, command: CommandBody, timeoutMs = 10_000): Promise<MessageOf<'reply'>> {
    const h = this.#hosts.get(hostId);
    if (!h?.socket) throw new Error(`host ${hostId} is not connected`);
    return (await this.#request(h, createMessage('command', { command }), timeoutMs)) as MessageOf<'reply'>;
  }

  /** Drop a host's connection without a close handshake, as a network failure would. */
  dropConnection(hostId: string): void {
    this.#hosts.get(hostId)?.socket?.terminate();
  }

  /** Send raw text to a host's socket (bad-input tests). */
  sendRaw(hostId: string, text: string): void {
    this.#hosts.get(hostId)?.socket?.send(text);
  }

  messages<T extends AgentMessage['type']>(type: T, hostId?: string): MessageOf<T>[] {
    return this.received
      .filter((r) => r.message.type === type && (hostId === undefined || r.hostId === hostId))
      .map((r) => r.message as MessageOf<T>);
  }

  /** Poll until `check` returns a value (not null/undefined/false). */
  async waitFor<T>(what: string, check: () => T | null | undefined | false, timeoutMs = 30_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = check();
      if (value !== null && value !== undefined && value !== false) return value;
      if (Date.now() > deadline) throw new Error(`fake control plane: timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async close(): Promise<void> {
    for (const client of this.#wss.clients) client.terminate();
    this.#wss.close();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #send(socket: WebSocket, message: ControlPlaneMessage): void {
    socket.send(encodeMessage({ ...message, v: this.#options.protocolVersion }));
  }

  #request(h: HostRecord, message: ControlPlaneMessage, timeoutMs: number): Promise<AgentMessage> {
    const socket = h.socket;
    if (!socket) return Promise.reject(new Error(`host ${h.hostId} is not connected`));
    return h.pending.request(message, (m) => this.#send(socket, m), timeoutMs);
  }

  async #sendDesired(h: HostRecord, timeoutMs: number): Promise<MessageOf<'reply'>> {
    const message = createMessage('desired_state', { generation: h.generation, workloads: h.desired ?? [] });
    return (await this.#request(h, message, timeoutMs)) as MessageOf<'reply'>;
  }

  #refuse(socket: WebSocket, code: RefusalCode, reason: string, id: string | null, retryable = false): void {
    this.refusalsSent.push({ code, reason });
    const refusal = createMessage(
      'refusal',
      { code, reason, retryable, supportedVersions: { ...SUPPORTED_PROTOCOL_VERSIONS } },
      id ? { id } : {},
    );
    this.#send(socket, refusal);
    socket.close(retryable ? CLOSE_CODES.refusedRetry : CLOSE_CODES.refusedFatal, closeReason(reason));
  }

  #accept(socket: WebSocket): void {
    let host: HostRecord | null = null;
    socket.on('message', (data) => {
      const result = decodeAgentMessage(data as Buffer);
      if (!result.ok) {
        if (result.code === 'unsupported_version' && result.head) {
          this.#refuse(
            socket,
            'protocol_incompatible',
            protocolMismatchReason('agent', result.head.v),
            result.head.id,
          );
        } else {
          this.#refuse(
            socket,
            'bad_message',
            `${result.code}: ${result.error}`,
            result.head?.id ?? null,
            true,
          );
        }
        return;
      }
      const message = result.message;
      this.received.push({ hostId: host?.hostId ?? null, message });
      switch (message.type) {
        case 'register': {
          const uses = this.#tokens.get(message.joinToken);
          if (!uses) {
            this.#refuse(
              socket,
              'join_token_invalid',
              'join token is unknown, expired or used up',
              message.id,
            );
            return;
          }
          if (uses === 1) this.#tokens.delete(message.joinToken);
          else this.#tokens.set(message.joinToken, uses - 1);
          const record: HostRecord = {
            hostId: `host_${randomBytes(8).toString('hex')}`,
            credential: randomBytes(32).toString('base64url'),
            generation: 0,
            desired: null,
            socket: null,
            inventory: null,
            agentVersion: null,
            connections: 0,
            pending: new PendingRequests<AgentMessage>(),
          };
          this.#hosts.set(record.hostId, record);
          this.#send(
            socket,
            createMessage(
              'registered',
              { hostId: record.hostId, credential: record.credential },
              { id: message.id },
            ),
          );
          return;
        }
        case 'hello': {
          const record = this.#hosts.get(message.hostId);
          if (!record || record.credential !== message.credential) {
            this.#refuse(socket, 'credential_invalid', 'host credential is unknown or revoked', message.id);
            return;
          }
          if (this.refuseConnections) {
            this.#refuse(socket, 'server_shutting_down', 'control plane is restarting', message.id, true);
            return;
          }
          if (record.socket) {
            this.#refuse(
              socket,
              'host_already_connected',
              `host ${record.hostId} is already connected`,
              message.id,
              true,
            );
            return;
          }
          host = record;
          record.socket = socket;
          record.connections += 1;
          record.inventory = message.inventory;
          record.agentVersion = message.agentVersion;
          this.#send(
            socket,
            createMessage(
              'welcome',
              {
                hostId: record.hostId,
                heartbeatSeconds: this.#options.heartbeatSeconds,
                metricsSeconds: this.#options.metricsSeconds,
                serverVersion: 'fake-0',
                serverTime: Date.now(),
              },
              { id: message.id },
            ),
          );
          // On every (re)connect the control plane sends the desired set, as the design says.
          if (record.desired) this.#sendDesired(record, 10_000).catch(() => {});
          return;
        }
        case 'heartbeat':
          if (host && this.ackHeartbeats)
            this.#send(
              socket,
              createMessage(
                'heartbeat_ack',
                { seq: message.seq, receivedAt: Date.now() },
                { id: message.id },
              ),
            );
          return;
        case 'refusal':
          this.refusalsReceived.push(message);
          return;
        case 'reply':
          host?.pending.settle(message);
          return;
        default:
          return;
      }
    });
    socket.on('close', () => {
      if (host && host.socket === socket) {
        host.socket = null;
        host.pending.rejectAll(new Error('agent disconnected'));
      }
    });
    socket.on('error', () => {});
  }
}

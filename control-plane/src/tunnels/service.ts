import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import {
  type CommandBody,
  MAX_FRAME_BYTES,
  TUNNEL_HEADERS,
  type TunnelTarget,
  TunnelTarget as TunnelTargetSchema,
} from '@anvil/shared/protocol';
import type { TSchema } from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import { type WebSocket, WebSocketServer } from 'ws';
import type { GatewayLogger } from '../agents/connection.ts';
import type { HostService } from '../hosts/hosts.ts';
import type { WorkloadService } from '../workloads/workloads.ts';
import { type PendingTunnel, PendingTunnels } from './pending.ts';
import { tunnelExec, tunnelStream } from './sessions.ts';
import type { ExecOptions, ExecSession, TunnelOpener } from './types.ts';

/** What the service needs from the agent gateway: a command with a reply, wherever the agent is. */
export interface TunnelCommandSender {
  sendCommand(hostId: string, command: CommandBody, timeoutMs?: number): Promise<unknown>;
}

export interface TunnelServiceOptions {
  agents: TunnelCommandSender;
  workloads: Pick<WorkloadService, 'get'>;
  hosts: Pick<HostService, 'authenticate'>;
  /** How long the agent has to connect the target and open the tunnel socket. */
  openTimeoutMs?: number;
}

const silent: GatewayLogger = { debug() {}, info() {}, warn() {}, error() {} };
// One checker per kind, so an error names the field rather than "expected union value".
const [streamChecker, execChecker] = TunnelTargetSchema.anyOf.map((variant: TSchema) =>
  TypeCompiler.Compile(variant),
) as [TypeCheck<TSchema>, TypeCheck<TSchema>];

/** The protocol's limits, as the caller's error: a target the agent would refuse never leaves. */
function checkTarget(target: TunnelTarget): void {
  const checker = target.kind === 'stream' ? streamChecker : execChecker;
  if (checker.Check(target)) return;
  const error = checker.Errors(target).First();
  const field = error?.path.replace(/^\//, '').replaceAll('/', '.') || 'target';
  throw new ApiError('VALIDATION_ERROR', `tunnel ${field} ${error?.message ?? 'is invalid'}`, {
    field,
    reason: error?.message ?? 'is invalid',
  });
}

/**
 * Reverse tunnels through the agents (TunnelOpener). Opening one: a one-time ticket (random id and
 * token, expiring with the open time-out), the `open_tunnel` command to the workload's host, then the
 * agent's tunnel socket at AGENT_TUNNEL_PATH, checked against the ticket and the host credential
 * before it is upgraded. The agent replies only once its socket is open, so a successful reply means
 * the socket has been claimed here.
 *
 * Several replicas: the command reaches the agent wherever it is connected, but the tunnel socket must
 * land on the replica that asked (the one holding the ticket); elsewhere it is refused with 401.
 */
export class TunnelService implements TunnelOpener {
  readonly #o: TunnelServiceOptions;
  readonly #pending = new PendingTunnels();
  readonly #wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_FRAME_BYTES,
    perMessageDeflate: false,
    clientTracking: true,
  });
  #logger: GatewayLogger = silent;
  #closing = false;

  constructor(options: TunnelServiceOptions) {
    this.#o = options;
  }

  useLogger(logger: GatewayLogger): void {
    this.#logger = logger;
  }

  get openCount(): number {
    return this.#wss.clients.size;
  }

  async openStream(
    workloadId: string,
    port: number,
    options: { signal?: AbortSignal } = {},
  ): Promise<Duplex> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new ApiError('VALIDATION_ERROR', 'port must be an integer from 1 to 65535', {
        field: 'port',
        reason: 'out of range',
      });
    }
    const ws = await this.#open(workloadId, { kind: 'stream', port }, options.signal);
    return tunnelStream(ws);
  }

  async openExec(workloadId: string, options: ExecOptions): Promise<ExecSession> {
    const ws = await this.#open(workloadId, {
      kind: 'exec',
      command: options.command,
      tty: options.tty,
      env: options.env ?? {},
      cols: options.tty ? (options.cols ?? null) : null,
      rows: options.tty ? (options.rows ?? null) : null,
      user: options.user ?? null,
      workingDir: options.workingDir ?? null,
    });
    return tunnelExec(ws);
  }

  async #open(workloadId: string, target: TunnelTarget, signal?: AbortSignal): Promise<WebSocket> {
    signal?.throwIfAborted();
    checkTarget(target);
    if (this.#closing) throw new ApiError('HOST_NOT_CONNECTED', 'the control plane is shutting down');
    const workload = await this.#o.workloads.get(workloadId);
    const hostId = workload.hostId;
    const timeoutMs = this.#o.openTimeoutMs ?? 15_000;
    const ticket: PendingTunnel = this.#pending.create(
      hostId,
      timeoutMs + 1_000,
      () =>
        new ApiError('AGENT_TIMEOUT', `host ${hostId} did not open the tunnel within ${timeoutMs} ms`, {
          hostId,
          workloadId,
        }),
    );
    // An abort settles the wait at once; a socket the agent still opens is refused or closed.
    let onAbort = () => {};
    const aborted = new Promise<never>((_resolve, reject) => {
      onAbort = () => reject(signal?.reason ?? new Error('tunnel opening aborted'));
    });
    aborted.catch(() => {});
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await Promise.race([
        this.#o.agents.sendCommand(
          hostId,
          { name: 'open_tunnel', tunnelId: ticket.tunnelId, token: ticket.token, workloadId, target },
          timeoutMs,
        ),
        aborted,
      ]);
      const ws = await ticket.socket;
      if (signal?.aborted) {
        ws.terminate();
        signal.throwIfAborted();
      }
      this.#logger.debug({ hostId, workloadId, kind: target.kind }, 'tunnel open');
      return ws;
    } catch (error) {
      ticket.cancel(error as Error);
      // A socket claimed before the failure (a reply that came too late) is closed; an unclaimed
      // ticket is gone, so a socket arriving for it now is refused.
      void ticket.socket.then(
        (ws) => ws.terminate(),
        () => {},
      );
      throw error;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Upgrade requests at AGENT_TUNNEL_PATH (the gateway hands them over). Refused before the upgrade
   * with a bare HTTP status: 400 without the headers, 401 for a wrong credential or ticket, 503 while
   * shutting down.
   */
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    // Until ws owns the socket nothing else listens for its errors: an agent resetting the connection
    // while it is checked (or refused) must not become an uncaught 'error' that ends the process.
    const onError = () => socket.destroy();
    socket.on('error', onError);
    this.#authorise(request).then(
      (outcome) => {
        if (outcome.ok) socket.off('error', onError);
        if (!outcome.ok) {
          this.#logger.warn(
            { remote: request.socket.remoteAddress, reason: outcome.reason, status: outcome.status },
            'tunnel socket refused',
          );
          refuse(socket, outcome.status, outcome.reason);
          return;
        }
        this.#wss.handleUpgrade(request, socket, head, (ws) => outcome.accept(ws));
      },
      (error: unknown) => {
        this.#logger.error({ err: error }, 'checking a tunnel socket failed');
        refuse(socket, 500, 'internal error');
      },
    );
  }

  async #authorise(
    request: IncomingMessage,
  ): Promise<{ ok: true; accept(ws: WebSocket): void } | { ok: false; status: number; reason: string }> {
    if (this.#closing) return { ok: false, status: 503, reason: 'the control plane is shutting down' };
    const header = (name: string) => {
      const value = request.headers[name];
      return typeof value === 'string' && value.length > 0 && value.length <= 512 ? value : null;
    };
    const hostId = header(TUNNEL_HEADERS.hostId);
    const tunnelId = header(TUNNEL_HEADERS.tunnelId);
    const token = header(TUNNEL_HEADERS.token);
    const authorization = header('authorization');
    const credential = authorization?.startsWith('Bearer ') ? authorization.slice(7) : null;
    if (!hostId || !tunnelId || !token || !credential) {
      return {
        ok: false,
        status: 400,
        reason: 'a tunnel socket needs the host id, credential, tunnel id and token',
      };
    }
    const auth = await this.#o.hosts.authenticate(hostId, credential);
    if (!auth.ok) return { ok: false, status: 401, reason: auth.reason };
    const claim = this.#pending.claim(tunnelId, token, hostId);
    if (!claim.ok) return { ok: false, status: 401, reason: claim.reason };
    return { ok: true, accept: claim.accept };
  }

  /** Refuses new tunnels and closes the open ones (the agents close their ends). */
  closeAll(): void {
    this.#closing = true;
    this.#pending.cancelAll(new ApiError('HOST_NOT_CONNECTED', 'the control plane is shutting down'));
    for (const ws of this.#wss.clients) ws.terminate();
  }
}

function refuse(socket: Duplex, status: number, reason: string): void {
  const text = {
    400: 'Bad Request',
    401: 'Unauthorized',
    500: 'Internal Server Error',
    503: 'Service Unavailable',
  }[status];
  const body = `${reason}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${text ?? 'Error'}\r\nConnection: close\r\nContent-Type: text/plain\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

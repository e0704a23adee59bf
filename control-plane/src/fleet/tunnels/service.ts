import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import {
  type CommandBody,
  MAX_FRAME_BYTES,
  TUNNEL_HEADERS,
  TUNNEL_UPGRADE,
  type TunnelTarget,
  TunnelTarget as TunnelTargetSchema,
} from '@anvil/shared/protocol';
import type { TSchema } from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import { WebSocketServer } from 'ws';
import { type Logger, silentLogger } from '../../logger.ts';
import type { HostService } from '../hosts/hosts.ts';
import type { WorkloadService } from '../workloads/workloads.ts';
import { discardTunnelSocket, type PendingTunnel, PendingTunnels, type TunnelSocket } from './pending.ts';
import { tunnelExec, tunnelStream } from './sessions.ts';
import type { ExecOptions, ExecSession, TunnelOpener } from './types.ts';

type FileTarget = Extract<TunnelTarget, { kind: 'file' }>;

/** What the service needs from the agent gateway: a command with a reply, wherever the agent is. */
export interface TunnelCommandSender {
  sendCommand(hostId: string, command: CommandBody, timeoutMs?: number): Promise<unknown>;
}

/** Counts what a tunnel carries, both directions, until its socket closes (usage/transfer-meter.ts). */
export interface TunnelMeter {
  trackSocket(workloadId: string, channel: string, socket: Socket): void;
}

export interface TunnelServiceOptions {
  agents: TunnelCommandSender;
  meter?: TunnelMeter;
  workloads: Pick<WorkloadService, 'get'>;
  hosts: Pick<HostService, 'authenticate'>;
  /** How long the agent has to connect the target and open the tunnel socket. */
  openTimeoutMs?: number;
  /** This replica's own address for agents (ANVIL_REPLICA_URL), sent in open_tunnel; null: none. */
  dialUrl?: string | null;
  logger?: Logger;
}

// One checker per kind, so an error names the field rather than "expected union value".
const checkers = new Map<string, TypeCheck<TSchema>>(
  TunnelTargetSchema.anyOf.map((variant: TSchema) => [
    (variant as unknown as { properties: { kind: { const: string } } }).properties.kind.const,
    TypeCompiler.Compile(variant),
  ]),
);

/** The protocol's limits, as the caller's error: a target the agent would refuse never leaves. */
function checkTarget(target: TunnelTarget): void {
  const checker = checkers.get(target.kind)!;
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
 * agent's tunnel connection at AGENT_TUNNEL_PATH, checked against the ticket and the host credential
 * before it is upgraded. The agent replies only once its connection is open, so a successful reply
 * means it has been claimed here.
 *
 * Stream tunnels are offered as raw byte pipes (an HTTP Upgrade to TUNNEL_UPGRADE): openStream hands the
 * caller the upgraded socket itself, so the control plane's only cost per byte is the kernel's. An agent
 * that predates the upgrade dials a WebSocket instead, still accepted (framed, as exec tunnels are).
 *
 * Several replicas: the command reaches the agent wherever it is connected, but the tunnel socket must
 * land on the replica that asked (the one holding the ticket); elsewhere it is refused with 401. So the
 * command names this replica's own address (`dialUrl`, ANVIL_REPLICA_URL) and the agent dials it rather
 * than the balancer in front of all of them.
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
  /** Raw stream tunnels handed out and not yet closed (WebSocket ones are the server's clients). */
  readonly #raw = new Set<Socket>();
  readonly #logger: Logger;
  #closing = false;

  constructor(options: TunnelServiceOptions) {
    this.#o = options;
    this.#logger = options.logger ?? silentLogger;
  }

  get openCount(): number {
    return this.#wss.clients.size + this.#raw.size;
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
    const claimed = await this.#open(
      workloadId,
      { kind: 'stream', port, upgrade: TUNNEL_UPGRADE },
      options.signal,
    );
    return claimed.kind === 'raw' ? claimed.socket : tunnelStream(claimed.ws);
  }

  /**
   * The bytes of a file in the workload's volume (a file target): the agent writes them and ends the
   * socket; a reset instead of an end means the file could not be read to the end.
   */
  async openFile(workloadId: string, target: Omit<FileTarget, 'kind'>): Promise<Socket> {
    const claimed = await this.#open(workloadId, { kind: 'file', ...target });
    if (claimed.kind !== 'raw') {
      discardTunnelSocket(claimed);
      throw new ApiError('AGENT_COMMAND_FAILED', 'the agent opened a file tunnel without the raw upgrade');
    }
    return claimed.socket;
  }

  async openExec(workloadId: string, options: ExecOptions): Promise<ExecSession> {
    const claimed = await this.#open(workloadId, {
      kind: 'exec',
      command: options.command,
      tty: options.tty,
      env: options.env ?? {},
      cols: options.tty ? (options.cols ?? null) : null,
      rows: options.tty ? (options.rows ?? null) : null,
      user: options.user ?? null,
      workingDir: options.workingDir ?? null,
    });
    if (claimed.kind !== 'websocket') {
      // The ticket refuses raw claims for exec; this is a guard, not a path.
      discardTunnelSocket(claimed);
      throw new ApiError('AGENT_COMMAND_FAILED', 'the agent opened an exec tunnel without framing');
    }
    return tunnelExec(claimed.ws);
  }

  async #open(workloadId: string, target: TunnelTarget, signal?: AbortSignal): Promise<TunnelSocket> {
    signal?.throwIfAborted();
    checkTarget(target);
    if (this.#closing) throw new ApiError('HOST_NOT_CONNECTED', 'the control plane is shutting down');
    const workload = await this.#o.workloads.get(workloadId);
    // An abort while the workload was looked up: its listener below would never fire.
    signal?.throwIfAborted();
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
      target.kind !== 'exec',
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
          {
            name: 'open_tunnel',
            tunnelId: ticket.tunnelId,
            token: ticket.token,
            workloadId,
            target,
            ...(this.#o.dialUrl ? { dialUrl: this.#o.dialUrl } : {}),
          },
          timeoutMs,
        ),
        aborted,
      ]);
      const claimed = await ticket.socket;
      if (signal?.aborted) {
        discardTunnelSocket(claimed);
        signal.throwIfAborted();
      }
      this.#logger.debug({ hostId, workloadId, kind: target.kind, transport: claimed.kind }, 'tunnel open');
      if (claimed.kind === 'raw') this.#trackRaw(claimed.socket, { hostId, workloadId });
      // Stream tunnels carry the proxy's and port forwards' bytes; exec tunnels shells, scp and sftp.
      this.#o.meter?.trackSocket(workloadId, target.kind, claimed.socket);
      return claimed;
    } catch (error) {
      ticket.cancel(error as Error);
      // A socket claimed before the failure (a reply that came too late) is closed; an unclaimed
      // ticket is gone, so a socket arriving for it now is refused.
      void ticket.socket.then(discardTunnelSocket, () => {});
      throw error;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Counts a raw tunnel until it closes, and logs what it carried (the caller has the socket itself). */
  #trackRaw(socket: Socket, details: { hostId: string; workloadId: string }): void {
    if (socket.destroyed) return;
    // The upgrade's request and 101 went over this socket too: count the stream's bytes from here.
    const read = socket.bytesRead;
    const written = socket.bytesWritten;
    this.#raw.add(socket);
    socket.once('close', () => {
      this.#raw.delete(socket);
      this.#logger.debug(
        { ...details, bytesFromAgent: socket.bytesRead - read, bytesToAgent: socket.bytesWritten - written },
        'tunnel closed',
      );
    });
  }

  /**
   * Upgrade requests at AGENT_TUNNEL_PATH (the gateway hands them over): `Upgrade: websocket`, or
   * TUNNEL_UPGRADE for a raw stream tunnel. Refused before the upgrade with a bare HTTP status: 400
   * without the headers (or an upgrade this ticket or endpoint does not take), 401 for a wrong
   * credential or ticket, 503 while shutting down.
   */
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    // Until ws owns the socket nothing else listens for its errors: an agent resetting the connection
    // while it is checked (or refused) must not become an uncaught 'error' that ends the process. A raw
    // socket keeps this listener for its life: its user adds its own, and a reset must never be fatal.
    const onError = () => socket.destroy();
    socket.on('error', onError);
    const upgrade = (request.headers.upgrade ?? '').trim().toLowerCase();
    const raw = upgrade === TUNNEL_UPGRADE;
    this.#authorise(request, raw, upgrade).then(
      (outcome) => {
        if (!outcome.ok) {
          this.#logger.warn(
            { remote: request.socket.remoteAddress, reason: outcome.reason, status: outcome.status },
            'tunnel socket refused',
          );
          refuse(socket, outcome.status, outcome.reason);
          return;
        }
        if (raw) {
          outcome.accept({ kind: 'raw', socket: acceptRaw(socket as Socket, head) });
          return;
        }
        socket.off('error', onError);
        this.#wss.handleUpgrade(request, socket, head, (ws) =>
          outcome.accept({ kind: 'websocket', ws, socket: socket as Socket }),
        );
      },
      (error: unknown) => {
        this.#logger.error({ err: error }, 'checking a tunnel socket failed');
        refuse(socket, 500, 'internal error');
      },
    );
  }

  async #authorise(
    request: IncomingMessage,
    raw: boolean,
    upgrade: string,
  ): Promise<
    { ok: true; accept(socket: TunnelSocket): void } | { ok: false; status: number; reason: string }
  > {
    if (this.#closing) return { ok: false, status: 503, reason: 'the control plane is shutting down' };
    if (!raw && upgrade !== 'websocket') {
      return { ok: false, status: 400, reason: `a tunnel socket upgrades to websocket or ${TUNNEL_UPGRADE}` };
    }
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
    const claim = this.#pending.claim(tunnelId, token, hostId, raw);
    if (!claim.ok) return claim;
    return { ok: true, accept: claim.accept };
  }

  /** Refuses new tunnels and closes the open ones (the agents close their ends). */
  closeAll(): void {
    this.#closing = true;
    this.#pending.cancelAll(new ApiError('HOST_NOT_CONNECTED', 'the control plane is shutting down'));
    for (const ws of this.#wss.clients) ws.terminate();
    for (const socket of this.#raw) socket.destroy();
  }
}

/**
 * Completes a raw upgrade: `101 Switching Protocols`, then the socket is the tunnel. Bytes the agent sent
 * behind its request head (in the same read) go back in front of the stream.
 */
function acceptRaw(socket: Socket, head: Buffer): Socket {
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_UPGRADE}\r\n\r\n`,
  );
  if (head.length > 0) socket.unshift(head);
  // The HTTP server's request timers no longer apply; a tunnel lives as long as its ends want.
  socket.setTimeout(0);
  socket.setNoDelay(true);
  // FIN in one direction must not end the other: the caller half-closes as the container does.
  socket.allowHalfOpen = true;
  return socket;
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

import { createHash, randomBytes } from 'node:crypto';
import { ApiError, newId } from '@anvil/shared';
import type { LiveSessions } from '../access-revocation/live-sessions.ts';
import type { Actor } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import type { Principal } from '../auth/principal.ts';
import type { ClusterAccess } from '../clusters/access.ts';
import type { ExecSession, TunnelOpener } from '../fleet/tunnels/types.ts';
import type { Logger } from '../logger.ts';
import { LOGIN_SHELL } from '../ssh/relay.ts';
import { OutputBuffer } from './output-buffer.ts';

export const TERMINAL_DEFAULTS = {
  /** A detached session (socket closed, process alive) waits this long for its client to come back. */
  reconnectWindowMs: 60_000,
  /** Output kept for a reconnecting client; older bytes are reported as a gap. */
  bufferBytes: 1024 * 1024,
  /** One-time tickets for the WebSocket upgrade. */
  ticketTtlMs: 30_000,
};

/** Server → client messages (JSON text frames). */
export type TerminalServerMessage =
  | { type: 'ready'; session_id: string; seq: number; buffer_start: number }
  | { type: 'output'; seq: number; data: string }
  | { type: 'gap'; from: number; to: number }
  | { type: 'exit'; code: number | null }
  | { type: 'error'; code: string; message: string };

/** The attached client (a WebSocket in production). */
export interface TerminalClient {
  send(message: TerminalServerMessage): void;
  close(code: number, reason: string): void;
}

export class TerminalSession {
  readonly buffer: OutputBuffer;
  client: TerminalClient | null = null;
  exit: { code: number | null } | null = null;
  #expiry: NodeJS.Timeout | null = null;

  constructor(
    readonly id: string,
    readonly clusterId: string,
    readonly accountId: string,
    readonly userId: string,
    readonly exec: ExecSession,
    bufferBytes: number,
    /** Gives the session's place back to the account's terminal limit. */
    readonly release: () => void,
  ) {
    this.buffer = new OutputBuffer(bufferBytes);
  }

  expireIn(ms: number, onExpire: () => void): void {
    this.cancelExpiry();
    this.#expiry = setTimeout(onExpire, ms);
    this.#expiry.unref();
  }

  cancelExpiry(): void {
    if (this.#expiry) clearTimeout(this.#expiry);
    this.#expiry = null;
  }
}

interface Ticket {
  sessionId: string;
  clusterId: string;
  userId: string;
  expiresAt: number;
}

export interface TerminalServiceOptions {
  clusters: ClusterAccess;
  tunnels: () => TunnelOpener | null;
  /** Counts terminals against the account's limit; ends those whose opener lost access. */
  liveSessions: LiveSessions;
  clock: Clock;
  logger: Logger;
  reconnectWindowMs?: number;
  bufferBytes?: number;
  ticketTtlMs?: number;
}

/** A shell is a member's tool: service keys (programs running workloads) never open one. */
export function refuseServiceKey(principal: Principal): void {
  if (principal.keyType === 'service') {
    throw new ApiError('FORBIDDEN', 'service keys cannot open a terminal: use a member key', {
      keyType: 'service',
    });
  }
}

const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');

/**
 * Web terminal sessions: a PTY login shell in a running cluster's container (through the tunnels),
 * outliving its WebSocket for a reconnect window, its output numbered by byte offset and buffered so a
 * reconnecting client loses nothing. Sessions live in the process holding their exec tunnel; tickets
 * are one-time, short-lived and stored as hashes.
 */
export class TerminalService {
  readonly #sessions = new Map<string, TerminalSession>();
  readonly #tickets = new Map<string, Ticket>();
  readonly reconnectWindowMs: number;
  readonly ticketTtlMs: number;
  readonly #bufferBytes: number;

  constructor(private readonly options: TerminalServiceOptions) {
    this.reconnectWindowMs = options.reconnectWindowMs ?? TERMINAL_DEFAULTS.reconnectWindowMs;
    this.ticketTtlMs = options.ticketTtlMs ?? TERMINAL_DEFAULTS.ticketTtlMs;
    this.#bufferBytes = options.bufferBytes ?? TERMINAL_DEFAULTS.bufferBytes;
  }

  /** Opens a PTY shell in the cluster (write on the cluster required, cluster running) and a ticket to attach. */
  async create(
    actor: Actor,
    clusterId: string,
    size: { cols?: number | undefined; rows?: number | undefined },
  ) {
    refuseServiceKey(actor.principal);
    const cluster = await this.options.clusters.require(actor, clusterId, 'write');
    if (cluster.status !== 'running') {
      throw new ApiError(
        'INVALID_STATE',
        `cluster ${clusterId} is ${cluster.status}; a terminal needs it running`,
        {
          cluster_id: clusterId,
          status: cluster.status,
        },
      );
    }
    const tunnels = this.options.tunnels();
    if (!tunnels) throw new ApiError('SERVICE_UNAVAILABLE', 'no tunnels into containers are configured', {});
    const cols = size.cols ?? 80;
    const rows = size.rows ?? 24;
    let opened: TerminalSession | null = null;
    let revokedEarly: string | null = null;
    const release = this.options.liveSessions.hold({
      kind: 'terminal',
      accountId: cluster.accountId,
      grant: {
        accountId: cluster.accountId,
        userId: actor.principal.userId,
        clusterId,
        permission: 'write',
        apiKeyId: actor.principal.keyId,
      },
      end: (reason) => {
        if (opened) this.#revoke(opened, reason);
        else revokedEarly = reason;
      },
    });
    let exec: ExecSession;
    try {
      exec = await tunnels.openExec(clusterId, {
        command: LOGIN_SHELL,
        tty: true,
        cols,
        rows,
        env: { TERM: 'xterm-256color' },
      });
    } catch (error) {
      release();
      throw error;
    }
    const session = new TerminalSession(
      newId('term'),
      clusterId,
      cluster.accountId,
      actor.principal.userId,
      exec,
      this.#bufferBytes,
      release,
    );
    opened = session;
    this.#sessions.set(session.id, session);
    exec.stdout.on('data', (chunk: Buffer) => {
      const seq = session.buffer.append(chunk);
      session.client?.send({ type: 'output', seq, data: chunk.toString('base64') });
    });
    exec.exit.then((exit) => {
      session.exit = exit;
      session.client?.send({ type: 'exit', code: exit.code });
      session.client?.close(1000, 'process exited');
      // Kept for the reconnect window, so a client that was away still reads the end and the status.
      session.expireIn(this.reconnectWindowMs, () => this.#drop(session));
    });
    // Not attached yet: the client has the reconnect window to connect the first time.
    session.expireIn(this.reconnectWindowMs, () => this.#drop(session));
    if (revokedEarly !== null) {
      this.#revoke(session, revokedEarly);
      throw new ApiError('UNAUTHORIZED', `access to cluster ${clusterId} was revoked: ${revokedEarly}`, {
        cluster_id: clusterId,
      });
    }
    this.options.logger.info(
      { cluster_id: clusterId, user_id: actor.principal.userId, session_id: session.id },
      'terminal opened',
    );
    return { session, ticket: this.#issue(session) };
  }

  /** A fresh one-time ticket for an existing session of the caller (to reconnect from a browser). */
  async ticket(actor: Actor, clusterId: string, sessionId: string) {
    refuseServiceKey(actor.principal);
    await this.options.clusters.require(actor, clusterId, 'write');
    const session = this.#sessions.get(sessionId);
    if (!session || session.clusterId !== clusterId || session.userId !== actor.principal.userId) {
      throw notFound(sessionId);
    }
    return { session, ticket: this.#issue(session) };
  }

  #issue(session: TerminalSession): { value: string; expiresAt: Date } {
    const now = this.options.clock.now().getTime();
    for (const [hash, ticket] of this.#tickets) if (ticket.expiresAt <= now) this.#tickets.delete(hash);
    const value = `tkt_${randomBytes(24).toString('base64url')}`;
    const expiresAt = now + this.ticketTtlMs;
    this.#tickets.set(sha256(value), {
      sessionId: session.id,
      clusterId: session.clusterId,
      userId: session.userId,
      expiresAt,
    });
    return { value, expiresAt: new Date(expiresAt) };
  }

  /** Consumes a ticket: the session it opens, or null (unknown, used, expired, other cluster). */
  redeem(clusterId: string, ticketValue: string): TerminalSession | null {
    const hash = sha256(ticketValue);
    const ticket = this.#tickets.get(hash);
    this.#tickets.delete(hash);
    if (!ticket || ticket.expiresAt <= this.options.clock.now().getTime() || ticket.clusterId !== clusterId)
      return null;
    return this.#sessions.get(ticket.sessionId) ?? null;
  }

  /** The caller's session (Authorization header path), or null. */
  find(clusterId: string, sessionId: string, userId: string): TerminalSession | null {
    const session = this.#sessions.get(sessionId);
    return session && session.clusterId === clusterId && session.userId === userId ? session : null;
  }

  /**
   * Attaches a client, replacing any previous one, and replays output from byte `after` (a gap message
   * first when part of it was dropped), then the exit when the process already ended.
   */
  attach(session: TerminalSession, client: TerminalClient, after: number): void {
    session.cancelExpiry();
    const previous = session.client;
    session.client = client;
    previous?.close(4000, 'replaced by a newer connection');
    const from = Math.max(0, Math.min(after, session.buffer.end));
    client.send({
      type: 'ready',
      session_id: session.id,
      seq: session.buffer.end,
      buffer_start: session.buffer.start,
    });
    if (from < session.buffer.start) client.send({ type: 'gap', from, to: session.buffer.start });
    const replay = session.buffer.since(from);
    if (replay.data.length > 0)
      client.send({ type: 'output', seq: replay.seq, data: replay.data.toString('base64') });
    if (session.exit) {
      client.send({ type: 'exit', code: session.exit.code });
      client.close(1000, 'process exited');
    }
  }

  /** The client went away: the session waits for it for the reconnect window. */
  detach(session: TerminalSession, client: TerminalClient): void {
    if (session.client !== client) return;
    session.client = null;
    session.expireIn(this.reconnectWindowMs, () => this.#drop(session));
  }

  input(session: TerminalSession, data: Buffer): void {
    if (!session.exit) session.exec.stdin.write(data);
  }

  resize(session: TerminalSession, cols: number, rows: number): void {
    if (!session.exit) session.exec.resize(cols, rows);
  }

  signal(session: TerminalSession, name: string): void {
    if (!session.exit) session.exec.signal(name);
  }

  /** Ends a session now (DELETE, or the window passed). */
  close(session: TerminalSession): void {
    this.#drop(session);
  }

  /** The opener lost access to the cluster: the client is told why, and the shell is killed. */
  #revoke(session: TerminalSession, reason: string): void {
    session.client?.send({ type: 'error', code: 'UNAUTHORIZED', message: `access revoked: ${reason}` });
    // A close reason is at most 123 bytes.
    this.#drop(session, { code: 4001, reason: `access revoked: ${reason}`.slice(0, 120) });
  }

  #drop(session: TerminalSession, close = { code: 1000, reason: 'session closed' }): void {
    session.cancelExpiry();
    if (this.#sessions.get(session.id) !== session) return;
    this.#sessions.delete(session.id);
    session.release();
    session.client?.close(close.code, close.reason);
    session.client = null;
    session.exec.close();
    this.options.logger.info({ cluster_id: session.clusterId, session_id: session.id }, 'terminal closed');
  }

  closeAll(): void {
    for (const session of [...this.#sessions.values()]) this.#drop(session);
    this.#tickets.clear();
  }

  get size(): number {
    return this.#sessions.size;
  }
}

export function notFound(sessionId: string): ApiError {
  return new ApiError('NOT_FOUND', `no terminal session ${sessionId} of yours on this cluster`, {
    session_id: sessionId,
  });
}

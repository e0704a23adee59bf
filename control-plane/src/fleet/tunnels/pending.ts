import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Socket } from 'node:net';
import type { WebSocket } from 'ws';

/** How the agent's tunnel connection arrived: a WebSocket (framed) or a raw upgraded socket. */
/** A claimed tunnel connection; `socket` is the connection under it either way (for metering). */
export type TunnelSocket =
  | { kind: 'websocket'; ws: WebSocket; socket: Socket }
  | { kind: 'raw'; socket: Socket };

/** Closes an agent's tunnel connection that nobody will use. */
export function discardTunnelSocket(claimed: TunnelSocket): void {
  if (claimed.kind === 'websocket') claimed.ws.terminate();
  else claimed.socket.destroy();
}

/** A tunnel the control plane asked an agent for, waiting for the agent's tunnel socket. */
export interface PendingTunnel {
  readonly tunnelId: string;
  /** Handed to the agent inside the command, never stored or logged here: only its hash is kept. */
  readonly token: string;
  readonly hostId: string;
  /** Resolves with the agent's socket once it presented the token; rejects on expiry or cancel. */
  readonly socket: Promise<TunnelSocket>;
  cancel(reason: Error): void;
}

export type ClaimResult =
  | { ok: true; hostId: string; accept(socket: TunnelSocket): void }
  | { ok: false; status: 400 | 401; reason: string };

interface Entry {
  hostId: string;
  tokenHash: Buffer;
  /** Whether the ticket may be claimed by a raw upgrade (stream tunnels only). */
  raw: boolean;
  timer: NodeJS.Timeout;
  resolve(socket: TunnelSocket): void;
  reject(error: Error): void;
}

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * One-time tunnel tickets: a random id and token per tunnel, expiring after `ttlMs`. The token is
 * compared in constant time (on SHA-256 digests, so lengths never leak either) and a ticket is used up
 * by the first socket presenting the right token; a wrong token leaves it for the real agent.
 */
export class PendingTunnels {
  readonly #entries = new Map<string, Entry>();

  get size(): number {
    return this.#entries.size;
  }

  /** `raw`: the ticket may also be claimed by a raw upgrade (a stream tunnel), not only a WebSocket. */
  create(hostId: string, ttlMs: number, expired: () => Error, raw = false): PendingTunnel {
    const tunnelId = randomBytes(16).toString('base64url');
    const token = randomBytes(32).toString('base64url');
    let resolve!: (socket: TunnelSocket) => void;
    let reject!: (error: Error) => void;
    const socket = new Promise<TunnelSocket>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // A caller that gave up must not leave an unhandled rejection behind.
    socket.catch(() => {});
    const timer = setTimeout(() => {
      if (this.#entries.delete(tunnelId)) reject(expired());
    }, ttlMs);
    timer.unref();
    this.#entries.set(tunnelId, { hostId, tokenHash: digest(token), raw, timer, resolve, reject });
    return {
      tunnelId,
      token,
      hostId,
      socket,
      cancel: (reason) => {
        const entry = this.#entries.get(tunnelId);
        if (!entry) return;
        this.#entries.delete(tunnelId);
        clearTimeout(entry.timer);
        entry.reject(reason);
      },
    };
  }

  /**
   * Checks a tunnel socket's claim. On success the ticket is gone (single use) and `accept` hands the
   * upgraded socket to whoever waits for it. `raw`: the claim comes as a raw upgrade, which only a
   * stream ticket takes (refused with 400, the ticket kept).
   */
  claim(tunnelId: string, token: string, hostId: string, raw = false): ClaimResult {
    const entry = this.#entries.get(tunnelId);
    // Same work whether or not the id is known, so timing tells nothing about which ids exist.
    const expected = entry?.tokenHash ?? digest(`unknown:${tunnelId}`);
    const tokenOk = timingSafeEqual(expected, digest(token));
    if (!entry || !tokenOk) {
      return { ok: false, status: 401, reason: 'unknown, expired or already used tunnel token' };
    }
    if (entry.hostId !== hostId) {
      return { ok: false, status: 401, reason: 'the tunnel was asked of another host' };
    }
    if (raw && !entry.raw) {
      return { ok: false, status: 400, reason: 'this tunnel takes a WebSocket, not a raw upgrade' };
    }
    this.#entries.delete(tunnelId);
    clearTimeout(entry.timer);
    return { ok: true, hostId, accept: (socket) => entry.resolve(socket) };
  }

  cancelAll(reason: Error): void {
    for (const [id, entry] of this.#entries) {
      this.#entries.delete(id);
      clearTimeout(entry.timer);
      entry.reject(reason);
    }
  }
}

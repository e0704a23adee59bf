import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { WebSocket } from 'ws';

/** A tunnel the control plane asked an agent for, waiting for the agent's tunnel socket. */
export interface PendingTunnel {
  readonly tunnelId: string;
  /** Handed to the agent inside the command, never stored or logged here: only its hash is kept. */
  readonly token: string;
  readonly hostId: string;
  /** Resolves with the agent's socket once it presented the token; rejects on expiry or cancel. */
  readonly socket: Promise<WebSocket>;
  cancel(reason: Error): void;
}

export type ClaimResult =
  | { ok: true; hostId: string; accept(socket: WebSocket): void }
  | { ok: false; reason: string };

interface Entry {
  hostId: string;
  tokenHash: Buffer;
  timer: NodeJS.Timeout;
  resolve(socket: WebSocket): void;
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

  create(hostId: string, ttlMs: number, expired: () => Error): PendingTunnel {
    const tunnelId = randomBytes(16).toString('base64url');
    const token = randomBytes(32).toString('base64url');
    let resolve!: (socket: WebSocket) => void;
    let reject!: (error: Error) => void;
    const socket = new Promise<WebSocket>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // A caller that gave up must not leave an unhandled rejection behind.
    socket.catch(() => {});
    const timer = setTimeout(() => {
      if (this.#entries.delete(tunnelId)) reject(expired());
    }, ttlMs);
    timer.unref();
    this.#entries.set(tunnelId, { hostId, tokenHash: digest(token), timer, resolve, reject });
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
   * upgraded socket to whoever waits for it.
   */
  claim(tunnelId: string, token: string, hostId: string): ClaimResult {
    const entry = this.#entries.get(tunnelId);
    // Same work whether or not the id is known, so timing tells nothing about which ids exist.
    const expected = entry?.tokenHash ?? digest(`unknown:${tunnelId}`);
    const tokenOk = timingSafeEqual(expected, digest(token));
    if (!entry || !tokenOk) return { ok: false, reason: 'unknown, expired or already used tunnel token' };
    if (entry.hostId !== hostId) return { ok: false, reason: 'the tunnel was asked of another host' };
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

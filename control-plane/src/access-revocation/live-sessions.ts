import { ApiError } from '@anvil/shared';
import type { Logger } from '../logger.ts';
import type { SessionAccessCheck, SessionGrant } from './access-check.ts';
import type { AccessRevocations, Revocation } from './revocations.ts';

export const SESSION_KINDS = ['terminal', 'log_stream', 'ssh', 'proxy_websocket'] as const;
export type SessionKind = (typeof SESSION_KINDS)[number];

/** Concurrent sessions of one kind an account may hold in one control-plane process. */
export type SessionLimits = Record<SessionKind, number>;

const KIND_NAMES: Record<SessionKind, string> = {
  terminal: 'terminal sessions',
  log_stream: 'log streams',
  ssh: 'SSH connections',
  proxy_websocket: 'proxy WebSocket connections',
};

export interface HeldSession {
  kind: SessionKind;
  /** The account the session counts against (the cluster's). */
  accountId: string;
  /** What the session needs to go on; null for a session without a member (a public proxy port). */
  grant: SessionGrant | null;
  /** Ends the session, telling its client why; called at most once. */
  end(reason: string): void;
}

/** Thrown when an account already holds its limit of sessions of a kind (HTTP 429). */
export function overLimit(kind: SessionKind, limit: number): ApiError {
  return new ApiError(
    'RATE_LIMITED',
    `this account already has ${limit} open ${KIND_NAMES[kind]} (the limit); close one and try again`,
    { reason: 'max_concurrent_sessions', session_kind: kind, limit },
  );
}

function concerns(grant: SessionGrant, revocation: Revocation): boolean {
  if (grant.accountId !== revocation.accountId) return false;
  if (revocation.userId !== undefined && grant.userId !== revocation.userId) return false;
  if (revocation.keyId !== undefined && grant.apiKeyId !== revocation.keyId) return false;
  if (revocation.sshKeyId !== undefined && grant.sshKeyId !== revocation.sshKeyId) return false;
  if (revocation.resourceId !== undefined && grant.clusterId !== revocation.resourceId) return false;
  return true;
}

/**
 * The long-lived sessions of this process (terminals, log streams, SSH connections, proxy
 * WebSockets): counted per account and kind against the operator's limits, and re-checked when a
 * revocation concerns them, those that lost their access ended within the time of one check.
 */
export class LiveSessions {
  readonly #held = new Set<HeldSession>();
  readonly #counts = new Map<string, number>();

  constructor(
    private readonly options: {
      revocations: AccessRevocations;
      check: SessionAccessCheck;
      limits: SessionLimits;
      logger: Logger;
    },
  ) {
    options.revocations.subscribe((revocation) => this.#revoke(revocation));
  }

  /** Registers a session; throws 429 RATE_LIMITED when its account holds the limit. Returns its release. */
  hold(session: HeldSession): () => void {
    const countKey = `${session.accountId}\n${session.kind}`;
    const count = this.#counts.get(countKey) ?? 0;
    const limit = this.options.limits[session.kind];
    if (count >= limit) throw overLimit(session.kind, limit);
    this.#counts.set(countKey, count + 1);
    this.#held.add(session);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#held.delete(session);
      const left = (this.#counts.get(countKey) ?? 1) - 1;
      if (left > 0) this.#counts.set(countKey, left);
      else this.#counts.delete(countKey);
    };
  }

  /** Open sessions of a kind held by an account in this process. */
  count(accountId: string, kind: SessionKind): number {
    return this.#counts.get(`${accountId}\n${kind}`) ?? 0;
  }

  #revoke(revocation: Revocation): void {
    for (const session of this.#held) {
      const grant = session.grant;
      if (!grant || !concerns(grant, revocation)) continue;
      this.options.check.check(grant, { fresh: true }).then(
        (verdict) => {
          if (verdict.allowed || !this.#held.has(session)) return;
          this.options.logger.info(
            {
              kind: session.kind,
              cluster_id: grant.clusterId,
              user_id: grant.userId,
              reason: verdict.reason,
            },
            'session ended: access revoked',
          );
          session.end(verdict.reason);
        },
        (error: unknown) =>
          this.options.logger.error(
            { err: error, kind: session.kind, cluster_id: grant.clusterId },
            'access re-check of a session failed',
          ),
      );
    }
  }
}

import { randomUUID } from 'node:crypto';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';

/** The PostgreSQL channel carrying revocations between control-plane processes. */
export const REVOCATION_CHANNEL = 'anvil_access_revoked';

export type RevocationReason =
  | 'key_revoked'
  | 'member_suspended'
  | 'member_removed'
  | 'member_changed'
  | 'share_revoked'
  | 'grant_revoked'
  | 'ssh_key_deleted';

/**
 * Access that someone lost. The fields narrow which sessions it may concern: every session of the
 * account matching all the given fields is re-checked, and ended when the check now fails.
 */
export interface Revocation {
  accountId: string;
  reason: RevocationReason;
  userId?: string | undefined;
  /** An API key (sessions opened with it). */
  keyId?: string | undefined;
  sshKeyId?: string | undefined;
  /** A resource (cluster) the access was lost on. */
  resourceId?: string | undefined;
}

export type RevocationListener = (revocation: Revocation) => void;

const TEXT_FIELDS = ['accountId', 'reason', 'userId', 'keyId', 'sshKeyId', 'resourceId'] as const;

function parse(payload: string): (Revocation & { from: string }) | null {
  let value: unknown;
  try {
    value = JSON.parse(payload);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null) return null;
  const record = value as Record<string, unknown>;
  if (typeof record['from'] !== 'string' || typeof record['accountId'] !== 'string') return null;
  for (const field of TEXT_FIELDS) {
    if (record[field] !== undefined && typeof record[field] !== 'string') return null;
  }
  return record as unknown as Revocation & { from: string };
}

/**
 * The one place revocations go through: the key, team and share code publish what was taken away,
 * and whoever holds sessions (proxy cookies, SSH, terminals, log streams) subscribes. A revocation is
 * delivered here at once and to every other process sharing the database over LISTEN/NOTIFY, the way
 * the key resolver's invalidations travel. Delivery to other processes is at most once: subscribers
 * re-check access against the database, and re-check on use, so a lost notice costs only its promptness.
 */
export class AccessRevocations {
  readonly #listeners = new Set<RevocationListener>();
  readonly #origin = randomUUID();
  #unlisten: (() => Promise<void>) | null = null;

  constructor(
    private readonly db: Database,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    this.#unlisten = await this.db.listen(REVOCATION_CHANNEL, (payload) => {
      const revocation = parse(payload);
      if (!revocation) {
        this.logger.warn({ payload: payload.slice(0, 200) }, 'unreadable access revocation ignored');
        return;
      }
      if (revocation.from === this.#origin) return;
      const { from: _from, ...rest } = revocation;
      this.#deliver(rest);
    });
  }

  async stop(): Promise<void> {
    await this.#unlisten?.();
    this.#unlisten = null;
  }

  /** Returns the function that unsubscribes. */
  subscribe(listener: RevocationListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Delivers here at once, then tells the other processes. */
  async publish(revocation: Revocation): Promise<void> {
    this.#deliver(revocation);
    await this.db.notify(REVOCATION_CHANNEL, JSON.stringify({ ...revocation, from: this.#origin }));
  }

  #deliver(revocation: Revocation): void {
    for (const listener of this.#listeners) {
      try {
        listener(revocation);
      } catch (error) {
        this.logger.error({ err: error, revocation }, 'access revocation subscriber failed');
      }
    }
  }
}

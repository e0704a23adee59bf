import type { CommandBody } from '@anvil/shared/protocol';
import type { Database } from '../../db/index.ts';
import { BatchedCalls } from '../../util/batched-calls.ts';

/** The PostgreSQL channel control-plane processes use to reach the one holding an agent's socket. */
export const AGENT_BUS_CHANNEL = 'anvil_agents';

/** NOTIFY payloads must stay under 8000 bytes; messages are kept well below. */
export const MAX_BUS_PAYLOAD_BYTES = 7_500;

export type BusMessage =
  /** A host's desired set changed: whoever holds its socket pushes it. */
  | { t: 'desired'; hostId: string }
  /** A host was welcomed on connection `connectionId`: any other connection of it is replaced. */
  | { t: 'connected'; hostId: string; connectionId: string }
  /** A host was deleted: its connection is refused and closed. */
  | { t: 'deleted'; hostId: string }
  | { t: 'command'; to: string; requestId: string; hostId: string; command: CommandBody; timeoutMs: number }
  | {
      t: 'command_result';
      to: string;
      requestId: string;
      ok: boolean;
      result?: unknown;
      error?: { code: string; message: string; details: Record<string, unknown> };
    };

type Envelope = BusMessage & { from: string };

/**
 * LISTEN/NOTIFY between control-plane processes sharing one PostgreSQL (on PGlite there is one process
 * and the bus only hears itself, which it ignores). Delivery is at most once and only to processes
 * listening at the time: everything here is a nudge whose effect the database can reconstruct.
 */
export class ReplicaBus {
  #unlisten: (() => Promise<void>) | null = null;
  /** Messages published together (a reconnect wave's `connected`s) go out in one statement. */
  readonly #notifications: BatchedCalls<string, undefined>;

  constructor(
    private readonly db: Database,
    readonly replicaId: string,
  ) {
    this.#notifications = new BatchedCalls(async (payloads) => {
      await db.sql.query('SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', [
        AGENT_BUS_CHANNEL,
        payloads,
      ]);
      return payloads.map(() => undefined);
    }, 500);
  }

  async start(
    onMessage: (message: BusMessage, from: string) => void,
    onError: (error: unknown) => void,
  ): Promise<void> {
    this.#unlisten = await this.db.listen(AGENT_BUS_CHANNEL, (payload) => {
      let envelope: Envelope;
      try {
        envelope = JSON.parse(payload) as Envelope;
      } catch (error) {
        onError(error);
        return;
      }
      if (envelope.from === this.replicaId) return;
      if ('to' in envelope && envelope.to !== this.replicaId) return;
      onMessage(envelope, envelope.from);
    });
  }

  async stop(): Promise<void> {
    await this.#unlisten?.();
    this.#unlisten = null;
  }

  /** Throws when the message is too large for NOTIFY. */
  async publish(message: BusMessage): Promise<void> {
    const payload = JSON.stringify({ ...message, from: this.replicaId });
    if (Buffer.byteLength(payload) > MAX_BUS_PAYLOAD_BYTES) {
      throw new Error(
        `bus message ${message.t} of ${Buffer.byteLength(payload)} bytes is too large for NOTIFY`,
      );
    }
    // PGlite is embedded: no other process shares it, so there is nobody to tell.
    if (this.db.kind === 'pglite') return;
    await this.#notifications.call(payload);
  }
}

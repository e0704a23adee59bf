import type { Clock } from '../../auth/clock.ts';
import type { Database } from '../../db/index.ts';
import { cleanJson, cleanText } from '../agents/sanitize.ts';

/**
 * What the timeline of a host records. joined: registered with a join token; connected/disconnected:
 * its agent's WebSocket; unreachable/recovered: heartbeats stopped past the grace period, or resumed on
 * the same connection; cordoned/uncordoned/deleted: operator actions (a drain is a cordon); gpu_health:
 * a GPU's health state changed (recorded by the GPU health code with the GPU and its reasons in detail).
 */
export const HOST_EVENT_TYPES = [
  'joined',
  'connected',
  'disconnected',
  'unreachable',
  'recovered',
  'cordoned',
  'uncordoned',
  'deleted',
  'gpu_health',
] as const;
export type HostEventType = (typeof HOST_EVENT_TYPES)[number];

export interface HostEventRecord {
  /** Increases with every event (as a string: it is a 64-bit sequence). */
  id: string;
  at: string;
  type: HostEventType;
  message: string;
  detail: Record<string, unknown> | null;
}

/** What the timeline needs of a GPU health change (the GPU health code's notice has these fields). */
export interface GpuHealthChangeNotice {
  hostId: string;
  gpuIndex: number;
  gpuUuid: string;
  from: string | null;
  to: string;
  reasons: readonly { code: string; severity?: string; message?: string }[];
  /** Who reset it; null or absent: the agent's report. */
  by?: unknown;
}

/** Longest message kept; the reasons a message quotes come from agents and operators. */
const MAX_MESSAGE = 1_000;

/** The message and detail as stored: cut to length, detail cleaned of what JSON cannot hold. */
export function hostEventFields(
  message: string,
  detail: Record<string, unknown> | null,
): { message: string; detail: Record<string, unknown> | null } {
  return { message: cleanText(message, MAX_MESSAGE), detail: detail === null ? null : cleanJson(detail) };
}

/**
 * The host timeline: one row per thing that happened to a host. The HostService writes its own events
 * in the statement or transaction of the change, so the timeline never
 * shows a change that did not commit; other modules (GPU health) call `record`.
 */
export class HostEventLog {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async record(
    hostId: string,
    type: HostEventType,
    message: string,
    detail: Record<string, unknown> | null = null,
  ): Promise<void> {
    const clean = hostEventFields(message, detail);
    await this.db.sql.query(
      'INSERT INTO host_events (host_id, at, type, message, detail) VALUES ($1, $2, $3, $4, $5)',
      [
        hostId,
        this.clock.now().toISOString(),
        type,
        clean.message,
        clean.detail && JSON.stringify(clean.detail),
      ],
    );
  }

  /**
   * A GPU's kept health changed: the agent reported a worse state, or an operator reset it. Shaped like
   * the GPU health code's change notice (FleetEvents), which the fleet passes here as it is.
   */
  async recordGpuHealth(change: GpuHealthChangeNotice): Promise<void> {
    const reasons = change.reasons.map((r) => r.code);
    const verdict = `GPU ${change.gpuIndex} ${change.from ?? 'unreported'} → ${change.to}`;
    const why = reasons.length > 0 ? `: ${reasons.join(', ')}` : '';
    const by = change.by ? ' (reset by an operator)' : '';
    await this.record(change.hostId, 'gpu_health', `${verdict}${why}${by}`, {
      gpuIndex: change.gpuIndex,
      gpuUuid: change.gpuUuid,
      from: change.from,
      to: change.to,
      reasons: change.reasons,
      by: change.by ?? null,
    });
  }

  /** A host's events, newest first (by id: the order they were written in), optionally only those older than event `before` or since `from`. */
  async list(
    hostId: string,
    options: { limit: number; before?: string | undefined; from?: Date | undefined; types?: string[] },
  ): Promise<HostEventRecord[]> {
    const rows = await this.db.sql.query<{
      id: string | number;
      at: Date | string;
      type: HostEventType;
      message: string;
      detail: unknown;
    }>(
      `SELECT id, at, type, message, detail FROM host_events
       WHERE host_id = $1 AND ($2::bigint IS NULL OR id < $2) AND ($3::timestamptz IS NULL OR at >= $3)
         AND ($4::text[] IS NULL OR type = ANY($4))
       ORDER BY id DESC LIMIT $5`,
      [
        hostId,
        options.before ?? null,
        options.from?.toISOString() ?? null,
        options.types?.length ? options.types : null,
        options.limit,
      ],
    );
    return rows.map((r) => ({
      id: String(r.id),
      at: new Date(r.at).toISOString(),
      type: r.type,
      message: r.message,
      detail:
        r.detail === null
          ? null
          : typeof r.detail === 'string'
            ? (JSON.parse(r.detail) as Record<string, unknown>)
            : (r.detail as Record<string, unknown>),
    }));
  }
}

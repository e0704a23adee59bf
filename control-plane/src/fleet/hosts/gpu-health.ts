import { ApiError } from '@anvil/shared';
import type { GpuHealthReason, GpuHealthState, GpuMetrics, Inventory } from '@anvil/shared/protocol';
import type { AuditActor, AuditLog } from '../../accounts/audit.ts';
import type { Clock } from '../../auth/clock.ts';
import type { Prisma } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import { lockHost, refreshHost } from '../../scheduler/capacity.ts';
import { cleanJson } from '../agents/sanitize.ts';
import type { FleetEvents, GpuHealthChange } from './events.ts';

const RANK: Record<GpuHealthState, number> = { healthy: 0, degraded: 1, failed: 2 };

interface Row {
  gpu_index: number;
  gpu_uuid: string;
  state: GpuHealthState;
  reasons: GpuHealthReason[] | string;
}

/** Words for a change, for audit entries, logs and cluster status reasons. */
export function describeReasons(reasons: readonly GpuHealthReason[]): string {
  return reasons.length === 0 ? 'no reason given' : reasons.map((r) => `${r.code}: ${r.message}`).join('; ');
}

/**
 * GPU health as the control plane keeps it (host_gpu_health). Sticky: a GPU takes the worst state its agent
 * reports and keeps it until an operator resets it, because a GPU that threw XID 79 once may look fine on
 * its next sample and fail the next job. A change to or from `failed` recomputes the host's capacity under
 * its lock (a failed GPU is never free: scheduler/capacity.ts). Every change is announced on FleetEvents
 * (the cluster module reports and, by policy, stops what runs there) and written to the operators'
 * account's audit log.
 */
export class GpuHealthService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly events: FleetEvents,
    private readonly audit: AuditLog | null,
  ) {}

  /** Takes the health of one metrics sample's GPUs; answers the changes it made. */
  async observe(hostId: string, gpus: readonly GpuMetrics[]): Promise<GpuHealthChange[]> {
    const reported = gpus.filter((g) => g.health !== undefined);
    if (reported.length === 0) return [];
    const rows = await this.db.sql.query<Row>(
      'SELECT gpu_index, gpu_uuid, state, reasons FROM host_gpu_health WHERE host_id = $1',
      [hostId],
    );
    const kept = new Map(rows.map((r) => [r.gpu_index, r]));
    const now = this.clock.now();
    const changes: GpuHealthChange[] = [];
    for (const gpu of reported) {
      const health = gpu.health!;
      const reasons = cleanJson(health.reasons) as GpuHealthReason[];
      const row = kept.get(gpu.index);
      const replaced = row !== undefined && row.gpu_uuid !== gpu.uuid;
      if (row === undefined || replaced) {
        // First health of this GPU (or of a new board at this index): taken as it is.
        await this.db.sql.query(
          `INSERT INTO host_gpu_health (host_id, gpu_index, gpu_uuid, state, reasons, since, updated_at)
           VALUES ($1, $2, $3, $4, $5::jsonb, $6, $6)
           ON CONFLICT (host_id, gpu_index) DO UPDATE SET gpu_uuid = EXCLUDED.gpu_uuid, state = EXCLUDED.state,
             reasons = EXCLUDED.reasons, since = EXCLUDED.since, reset_at = NULL, reset_by = NULL, updated_at = EXCLUDED.updated_at`,
          [hostId, gpu.index, gpu.uuid, health.state, JSON.stringify(reasons), now.toISOString()],
        );
        if (health.state !== 'healthy' || replaced) {
          changes.push({
            hostId,
            gpuIndex: gpu.index,
            gpuUuid: gpu.uuid,
            from: replaced ? row.state : null,
            to: health.state,
            reasons,
            at: now,
            by: null,
          });
        }
        continue;
      }
      const stored = typeof row.reasons === 'string' ? JSON.parse(row.reasons) : row.reasons;
      if (RANK[health.state] > RANK[row.state]) {
        // Only from the state read: a reset in between wins, and the next sample is judged against it.
        const updated = await this.db.sql.query(
          `UPDATE host_gpu_health SET state = $3, reasons = $4::jsonb, since = $5, updated_at = $5
            WHERE host_id = $1 AND gpu_index = $2 AND state = $6 RETURNING 1`,
          [hostId, gpu.index, health.state, JSON.stringify(reasons), now.toISOString(), row.state],
        );
        if (updated.length > 0) {
          changes.push({
            hostId,
            gpuIndex: gpu.index,
            gpuUuid: gpu.uuid,
            from: row.state,
            to: health.state,
            reasons,
            at: now,
            by: null,
          });
        }
      } else if (RANK[health.state] === RANK[row.state] && row.state !== 'healthy') {
        // Same state, new evidence: the reasons grow (no event: the state did not change).
        const codes = new Set((stored as GpuHealthReason[]).map((r) => r.code));
        const added = reasons.filter((r) => r.severity === row.state && !codes.has(r.code));
        if (added.length > 0) {
          await this.db.sql.query(
            `UPDATE host_gpu_health SET reasons = reasons || $3::jsonb, updated_at = $4
              WHERE host_id = $1 AND gpu_index = $2 AND state = $5`,
            [hostId, gpu.index, JSON.stringify(added), now.toISOString(), row.state],
          );
        }
      }
    }
    await this.#announce(changes);
    return changes;
  }

  /**
   * The operator clears a GPU's kept health: healthy until its agent reports otherwise (a fault that
   * persists comes back with the next sample). Answers the state before and after.
   */
  async reset(
    hostId: string,
    gpuIndex: number,
    actor: AuditActor,
  ): Promise<{
    previous: { state: GpuHealthState; reasons: GpuHealthReason[] } | null;
    change: GpuHealthChange | null;
  }> {
    const host = await this.db.prisma.host.findFirst({ where: { id: hostId, deletedAt: null } });
    if (!host) throw new ApiError('HOST_NOT_FOUND', `host ${hostId} not found`, { host_id: hostId });
    const device = ((host.inventory as Inventory | null)?.gpus?.devices ?? []).find(
      (d) => d.index === gpuIndex,
    );
    const rows = await this.db.sql.query<Row>(
      'SELECT gpu_index, gpu_uuid, state, reasons FROM host_gpu_health WHERE host_id = $1 AND gpu_index = $2',
      [hostId, gpuIndex],
    );
    const row = rows[0];
    if (!device && !row) {
      throw new ApiError('NOT_FOUND', `host ${hostId} has no GPU with index ${gpuIndex}`, {
        host_id: hostId,
        gpu_index: gpuIndex,
        gpu_indices: ((host.inventory as Inventory | null)?.gpus?.devices ?? []).map((d) => d.index),
      });
    }
    const now = this.clock.now();
    const previous = row
      ? {
          state: row.state,
          reasons: (typeof row.reasons === 'string'
            ? JSON.parse(row.reasons)
            : row.reasons) as GpuHealthReason[],
        }
      : null;
    let change: GpuHealthChange | null = null;
    if (row && row.state !== 'healthy') {
      await this.db.sql.query(
        `UPDATE host_gpu_health SET state = 'healthy', reasons = '[]'::jsonb, since = $3, reset_at = $3,
                reset_by = $4, updated_at = $3
          WHERE host_id = $1 AND gpu_index = $2`,
        [hostId, gpuIndex, now.toISOString(), actor.userId],
      );
      change = {
        hostId,
        gpuIndex,
        gpuUuid: row.gpu_uuid,
        from: row.state,
        to: 'healthy',
        reasons: [],
        at: now,
        by: actor,
      };
      await this.#announce([change]);
    } else {
      await this.#audit({
        hostId,
        gpuIndex,
        gpuUuid: device?.uuid ?? row!.gpu_uuid,
        from: row?.state ?? null,
        to: row?.state ?? 'healthy',
        reasons: [],
        at: now,
        by: actor,
      });
    }
    return { previous, change };
  }

  async #announce(changes: readonly GpuHealthChange[]): Promise<void> {
    if (changes.length === 0) return;
    const touchesCapacity = changes.filter((c) => c.from === 'failed' || c.to === 'failed');
    for (const hostId of new Set(touchesCapacity.map((c) => c.hostId))) {
      await this.db.prisma.$transaction(async (tx: Prisma.TransactionClient) => {
        await lockHost(tx, hostId);
        await refreshHost(tx, hostId);
      });
    }
    for (const change of changes) {
      await this.#audit(change);
      await this.events.gpuHealthChanged(change);
    }
  }

  /** An entry in the operators' account's audit log (fleet_change); none while there is no such account. */
  async #audit(change: GpuHealthChange): Promise<void> {
    const audit = this.audit;
    if (!audit) return;
    const operators = await this.db.prisma.account.findFirst({
      where: { operator: true },
      select: { id: true },
      orderBy: { createdAt: 'asc' },
    });
    if (!operators) return;
    await audit.record({
      accountId: operators.id,
      type: 'fleet_change',
      action: change.by ? 'gpu_health_reset' : 'gpu_health_changed',
      actor: change.by,
      resource: { type: 'host', id: change.hostId, name: `GPU ${change.gpuIndex} (${change.gpuUuid})` },
      details: {
        gpuIndex: change.gpuIndex,
        gpuUuid: change.gpuUuid,
        from: change.from,
        to: change.to,
        reasons: change.reasons.map((r) => ({
          code: r.code,
          severity: r.severity,
          message: r.message,
          source: r.source,
        })),
      },
    });
  }
}

/**
 * Per GPU, the sample of a batch with the worst health (the latest among equals): the kept state only
 * ever gets worse between resets, so the batch's worst is all that can change it.
 */
export function worstGpuHealth(samples: readonly { gpus: readonly GpuMetrics[] }[]): GpuMetrics[] {
  const worst = new Map<number, GpuMetrics>();
  for (const sample of samples) {
    for (const gpu of sample.gpus) {
      if (!gpu.health) continue;
      const seen = worst.get(gpu.index)?.health;
      if (!seen || RANK[gpu.health.state] >= RANK[seen.state]) worst.set(gpu.index, gpu);
    }
  }
  return [...worst.values()];
}

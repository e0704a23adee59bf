import { ApiError, newId } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';

/**
 * The spec's three; fleet_change: operators' changes to the host fleet (agent versions and upgrades, GPU
 * health changes and resets) in the operators' account; training_preemption: a training job gave its GPUs
 * to one of higher priority (training/preemption.ts).
 */
export const AUDIT_TYPES = [
  'permission_change',
  'access_denied',
  'role_assignment',
  'fleet_change',
  'training_preemption',
] as const;
export type AuditType = (typeof AUDIT_TYPES)[number];

export const AUDIT_PERIODS = ['1d', '7d', '30d', '90d'] as const;
export type AuditPeriod = (typeof AUDIT_PERIODS)[number];

/** How long audit events are kept when the account's security.audit.retention_days is not set. */
export const DEFAULT_AUDIT_RETENTION_DAYS = 90;

export interface AuditActor {
  userId: string;
  ip?: string | null | undefined;
}

export interface AuditInput {
  accountId: string;
  type: AuditType;
  action: string;
  actor: AuditActor | null;
  target?: { userId: string; name?: string | null | undefined } | undefined;
  resource?: { type: string; id: string; name?: string | null | undefined } | undefined;
  details?: Record<string, unknown> | undefined;
}

export interface AuditEventView {
  id: string;
  timestamp: string;
  type: string;
  actor: { userId: string | null; name: string | null; ipAddress: string | null };
  target?: { userId: string; name: string | null };
  resource?: { type: string; id: string; name: string | null };
  action: string;
  details: Record<string, unknown>;
}

export interface AuditQuery {
  period?: string | undefined;
  type?: string | undefined;
  userId?: string | undefined;
  resourceId?: string | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
}

type Tx = Prisma.TransactionClient;

export function periodDays(period: string, valid: readonly string[]): number {
  if (!valid.includes(period)) {
    throw new ApiError('INVALID_PERIOD', `period must be one of ${valid.join(', ')}`, {
      validPeriods: [...valid],
      received: period,
    });
  }
  return Number.parseInt(period, 10);
}

/** The audit log of permission changes, role assignments and access denials, one account at a time. */
export class AuditLog {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async record(input: AuditInput, tx?: Tx): Promise<void> {
    const client = tx ?? this.db.prisma;
    await client.auditEvent.create({
      data: {
        id: newId('audit'),
        accountId: input.accountId,
        type: input.type,
        action: input.action,
        actorId: input.actor?.userId ?? null,
        actorIp: input.actor?.ip ?? null,
        targetUserId: input.target?.userId ?? null,
        targetName: input.target?.name ?? null,
        resourceType: input.resource?.type ?? null,
        resourceId: input.resource?.id ?? null,
        resourceName: input.resource?.name ?? null,
        details: (input.details ?? {}) as Prisma.InputJsonValue,
        createdAt: this.clock.now(),
      },
    });
  }

  async list(accountId: string, query: AuditQuery) {
    const period = query.period ?? '7d';
    const days = periodDays(period, AUDIT_PERIODS);
    if (query.type !== undefined && !(AUDIT_TYPES as readonly string[]).includes(query.type)) {
      throw new ApiError('VALIDATION_ERROR', `type must be one of ${AUDIT_TYPES.join(', ')}`, {
        field: 'type',
        reason: `must be one of ${AUDIT_TYPES.join(', ')}`,
      });
    }
    const end = this.clock.now();
    const start = new Date(end.getTime() - days * 86_400_000);
    const where: Prisma.AuditEventWhereInput = {
      accountId,
      createdAt: { gte: start, lte: end },
      ...(query.userId ? { OR: [{ actorId: query.userId }, { targetUserId: query.userId }] } : {}),
      ...(query.resourceId ? { resourceId: query.resourceId } : {}),
    };
    const filtered: Prisma.AuditEventWhereInput = query.type ? { ...where, type: query.type } : where;
    const [rows, total, byType, shares] = await Promise.all([
      this.db.prisma.auditEvent.findMany({
        where: filtered,
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: query.limit ?? 100,
        skip: query.offset ?? 0,
      }),
      this.db.prisma.auditEvent.count({ where: filtered }),
      this.db.prisma.auditEvent.groupBy({ by: ['type'], where, _count: { _all: true } }),
      this.db.prisma.auditEvent.count({ where: { ...where, action: 'resource_shared' } }),
    ]);
    const count = (type: AuditType) => byType.find((row) => row.type === type)?._count._all ?? 0;

    const ids = new Set<string>();
    for (const row of rows) {
      if (row.actorId && !row.actorName) ids.add(row.actorId);
      if (row.targetUserId && !row.targetName) ids.add(row.targetUserId);
    }
    const users = ids.size
      ? await this.db.prisma.user.findMany({
          where: { accountId, id: { in: [...ids] } },
          select: { id: true, name: true, email: true },
        })
      : [];
    const nameOf = new Map(users.map((u) => [u.id, u.name ?? u.email]));

    const events: AuditEventView[] = rows.map((row) => ({
      id: row.id,
      timestamp: row.createdAt.toISOString(),
      type: row.type,
      actor: {
        userId: row.actorId,
        name: row.actorName ?? (row.actorId ? (nameOf.get(row.actorId) ?? null) : null),
        ipAddress: row.actorIp,
      },
      ...(row.targetUserId
        ? {
            target: {
              userId: row.targetUserId,
              name: row.targetName ?? nameOf.get(row.targetUserId) ?? null,
            },
          }
        : {}),
      ...(row.resourceId
        ? { resource: { type: row.resourceType ?? 'unknown', id: row.resourceId, name: row.resourceName } }
        : {}),
      action: row.action,
      details: (row.details ?? {}) as Record<string, unknown>,
    }));
    return {
      period,
      periodStart: start.toISOString(),
      periodEnd: end.toISOString(),
      total,
      events,
      summary: {
        permissionChanges: count('permission_change'),
        accessDenied: count('access_denied'),
        roleAssignments: count('role_assignment'),
        resourceShares: shares,
      },
    };
  }

  /**
   * Deletes events older than each account's security.audit.retention_days (default 90). Run at start
   * and then hourly; one statement for every account.
   */
  async prune(): Promise<number> {
    const rows = await this.db.sql.query<{ count: string }>(
      `WITH gone AS (
         DELETE FROM audit_events e
         WHERE e.created_at < $1::timestamptz - make_interval(days => COALESCE(
           (SELECT (s.data #>> '{security,audit,retention_days}')::int
              FROM account_settings s WHERE s.account_id = e.account_id), $2::int))
         RETURNING 1)
       SELECT count(*)::text AS count FROM gone`,
      [this.clock.now().toISOString(), DEFAULT_AUDIT_RETENTION_DAYS],
    );
    return Number(rows[0]?.count ?? 0);
  }
}

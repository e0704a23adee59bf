import type { Clock } from '../auth/clock.ts';
import { batchRowsFor, betweenStatements, type Database } from '../db/index.ts';
import { BatchedCalls } from '../util/batched-calls.ts';
import { periodDays } from './audit.ts';

export const ACTIVITY_KINDS = ['login', 'resource_created', 'execution', 'collaboration'] as const;
export type ActivityKind = (typeof ACTIVITY_KINDS)[number];

export const ACTIVITY_PERIODS = ['1d', '7d', '30d', '90d'] as const;

/** A member's API use after this much silence starts a new session, counted as a login. */
export const SESSION_GAP_MS = 30 * 60_000;
/** last_active_at is written at most this often per member and process. */
const TOUCH_INTERVAL_MS = 60_000;

interface Touch {
  accountId: string;
  userId: string;
  at: number;
}

export interface ActivityInput {
  accountId: string;
  userId: string;
  kind: ActivityKind;
  resourceType?: string | null | undefined;
  resourceId?: string | null | undefined;
}

/**
 * What members do, recorded as events: sessions (an authenticated request after 30 minutes of silence
 * counts as a login, since API keys have no login of their own), resources created, executions and
 * collaborations (shares given and received, joining a team). Member detail and team activity are
 * computed from these rows, never estimated.
 */
export class ActivityTracker {
  private readonly touched = new Map<string, number>();
  /**
   * Members' last-active writes, gathered: every member's minute runs out at about the same time under
   * steady traffic, and one statement per member then held the API's thread (PGlite) for a burst of
   * statements, the requests waiting behind it (bench/auth-verify.ts, 100 members: p99 of seconds).
   */
  readonly #touches: BatchedCalls<Touch, undefined>;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {
    this.#touches = new BatchedCalls(
      (touches) => this.#touchMany(touches),
      batchRowsFor(db.sql, 500),
      () => betweenStatements(db.sql),
    );
  }

  /** Whether touch would write: false while the member's last write is recent (the common case). */
  needsTouch(userId: string): boolean {
    const now = this.clock.now().getTime();
    const last = this.touched.get(userId);
    return !(last !== undefined && now - last < TOUCH_INTERVAL_MS && now >= last);
  }

  /** Notes an authenticated request; records a login when it starts a new session. */
  async touch(accountId: string, userId: string): Promise<void> {
    if (!this.needsTouch(userId)) return;
    const now = this.clock.now();
    this.touched.set(userId, now.getTime());
    if (this.touched.size > 100_000) this.touched.clear();
    await this.#touches.call({ accountId, userId, at: now.getTime() });
  }

  /**
   * Writes the members' last-active times in one statement and records a login for each whose previous
   * activity is older than the session gap (or absent), at the time of its first request here.
   */
  async #touchMany(touches: Touch[]): Promise<undefined[]> {
    const byUser = new Map<string, { accountId: string; first: number; last: number }>();
    for (const t of touches) {
      const seen = byUser.get(t.userId);
      if (!seen) byUser.set(t.userId, { accountId: t.accountId, first: t.at, last: t.at });
      else {
        seen.first = Math.min(seen.first, t.at);
        seen.last = Math.max(seen.last, t.at);
      }
    }
    const users = [...byUser];
    const rows = await this.db.sql.query<{ id: string; prev: Date | string | null }>(
      `UPDATE users AS u SET last_active_at = GREATEST(COALESCE(u.last_active_at, v.last_at), v.last_at)
       FROM unnest($1::text[], $2::timestamptz[]) AS v(id, last_at),
            LATERAL (SELECT last_active_at AS prev FROM users WHERE id = v.id) AS p
       WHERE u.id = v.id RETURNING u.id, p.prev`,
      [users.map(([id]) => id), users.map(([, u]) => new Date(u.last).toISOString())],
      'activity_touch_users',
    );
    const logins: { accountId: string; userId: string; at: Date }[] = [];
    for (const row of rows) {
      const user = byUser.get(row.id)!;
      const prev = row.prev === null ? null : new Date(row.prev).getTime();
      if (prev === null || user.first - prev >= SESSION_GAP_MS) {
        logins.push({ accountId: user.accountId, userId: row.id, at: new Date(user.first) });
      }
    }
    if (logins.length > 0) {
      await this.db.prisma.activityEvent.createMany({
        data: logins.map((l) => ({
          accountId: l.accountId,
          userId: l.userId,
          kind: 'login',
          createdAt: l.at,
        })),
      });
    }
    return touches.map(() => undefined);
  }

  /** Forgets in-process throttling (tests moving the clock backwards, suspended members). */
  forget(userId?: string): void {
    if (userId) this.touched.delete(userId);
    else this.touched.clear();
  }

  async record(input: ActivityInput): Promise<void> {
    await this.db.prisma.activityEvent.create({
      data: {
        accountId: input.accountId,
        userId: input.userId,
        kind: input.kind,
        resourceType: input.resourceType ?? null,
        resourceId: input.resourceId ?? null,
        createdAt: this.clock.now(),
      },
    });
  }

  async recordMany(inputs: ActivityInput[]): Promise<void> {
    if (inputs.length === 0) return;
    const createdAt = this.clock.now();
    await this.db.prisma.activityEvent.createMany({
      data: inputs.map((input) => ({
        accountId: input.accountId,
        userId: input.userId,
        kind: input.kind,
        resourceType: input.resourceType ?? null,
        resourceId: input.resourceId ?? null,
        createdAt,
      })),
    });
  }

  /** Member detail: activity and resources of one member, all time. */
  async member(accountId: string, userId: string, lastActiveAt: Date | null) {
    const [counts, lastLogin, owned, shared] = await Promise.all([
      this.db.prisma.activityEvent.groupBy({
        by: ['kind', 'resourceType'],
        where: { accountId, userId },
        _count: { _all: true },
      }),
      this.db.prisma.activityEvent.findFirst({
        where: { accountId, userId, kind: 'login' },
        orderBy: { createdAt: 'desc' },
        select: { createdAt: true },
      }),
      this.db.prisma.resource.groupBy({
        by: ['type'],
        where: { accountId, ownerId: userId, deletedAt: null },
        _count: { _all: true },
      }),
      this.db.sql.query<{ count: string }>(
        `SELECT count(DISTINCT s.resource_id)::text AS count FROM resource_shares s
         JOIN resources r ON r.id = s.resource_id AND r.account_id = s.account_id AND r.deleted_at IS NULL
         WHERE s.account_id = $1 AND s.user_id = $2 AND s.status = 'active' AND r.type = 'endpoint'
           AND (s.expires_at IS NULL OR s.expires_at > $3::timestamptz)`,
        [accountId, userId, this.clock.now().toISOString()],
      ),
    ]);
    const count = (kind: string, type?: string) =>
      counts
        .filter((row) => row.kind === kind && (type === undefined || row.resourceType === type))
        .reduce((sum, row) => sum + row._count._all, 0);
    const ownedOf = (type: string) => owned.find((row) => row.type === type)?._count._all ?? 0;
    const login = lastLogin?.createdAt ?? lastActiveAt;
    return {
      activity: {
        endpointsCreated: count('resource_created', 'endpoint'),
        clustersManaged: ownedOf('cluster'),
        totalExecutions: count('execution'),
        lastLogin: login ? login.toISOString() : null,
      },
      resources: {
        ownedEndpoints: ownedOf('endpoint'),
        ownedClusters: ownedOf('cluster'),
        sharedEndpoints: Number(shared[0]?.count ?? 0),
      },
    };
  }

  /**
   * Team activity over a period. Formulas (also in the OpenAPI description):
   * activeMembers: members with any activity in the period; newMembers: joined in the period;
   * collaborationScore: % of members with a collaboration in the period; activityGrowth: % change of
   * total activity against the previous period of the same length; memberEngagement: active ÷ total
   * members in %; retentionRate: % of the previous period's active members active again in this one.
   */
  async team(accountId: string, period = '30d') {
    const days = periodDays(period, ACTIVITY_PERIODS);
    const end = this.clock.now();
    const start = new Date(end.getTime() - days * 86_400_000);
    const previousStart = new Date(start.getTime() - days * 86_400_000);
    const [members, current, previous, shares] = await Promise.all([
      this.db.prisma.user.findMany({
        where: { accountId, status: { in: ['active', 'suspended'] } },
        select: {
          id: true,
          name: true,
          email: true,
          role: true,
          joinedAt: true,
          createdAt: true,
          department: true,
        },
        orderBy: { createdAt: 'asc' },
      }),
      this.db.prisma.activityEvent.groupBy({
        by: ['userId', 'kind', 'resourceType'],
        where: { accountId, createdAt: { gte: start, lte: end } },
        _count: { _all: true },
      }),
      this.db.prisma.activityEvent.groupBy({
        by: ['userId'],
        where: { accountId, createdAt: { gte: previousStart, lt: start } },
        _count: { _all: true },
      }),
      this.db.sql.query<{
        resource_id: string;
        type: string;
        owner_dept: string | null;
        user_dept: string | null;
      }>(
        `SELECT s.resource_id, r.type, o.department AS owner_dept, u.department AS user_dept
         FROM resource_shares s
         JOIN resources r ON r.id = s.resource_id AND r.account_id = s.account_id AND r.deleted_at IS NULL
         JOIN users o ON o.id = r.owner_id
         JOIN users u ON u.id = s.user_id
         WHERE s.account_id = $1 AND s.status = 'active'
           AND (s.expires_at IS NULL OR s.expires_at > $2::timestamptz)`,
        [accountId, end.toISOString()],
      ),
    ]);
    const memberIds = new Set(members.map((m) => m.id));
    const perMember = new Map<
      string,
      { logins: number; executions: number; created: number; collab: number }
    >();
    let totalActivity = 0;
    for (const row of current) {
      if (!memberIds.has(row.userId)) continue;
      const entry = perMember.get(row.userId) ?? { logins: 0, executions: 0, created: 0, collab: 0 };
      const n = row._count._all;
      totalActivity += n;
      if (row.kind === 'login') entry.logins += n;
      else if (row.kind === 'execution' && row.resourceType === 'endpoint') entry.executions += n;
      else if (row.kind === 'resource_created') entry.created += n;
      else if (row.kind === 'collaboration') entry.collab += n;
      perMember.set(row.userId, entry);
    }
    const previousActive = new Set(previous.filter((r) => memberIds.has(r.userId)).map((r) => r.userId));
    const previousTotal = previous
      .filter((r) => memberIds.has(r.userId))
      .reduce((s, r) => s + r._count._all, 0);
    const activeMembers = [...perMember.keys()].length;
    const totalMembers = members.length;
    const collaborating = [...perMember.values()].filter((e) => e.collab > 0).length;
    const retained = [...previousActive].filter((id) => perMember.has(id)).length;
    const percent = (part: number, whole: number) =>
      whole === 0 ? 0 : Math.round((part / whole) * 1000) / 10;
    const sharedEndpoints = new Set(shares.filter((s) => s.type === 'endpoint').map((s) => s.resource_id))
      .size;
    const crossTeam = new Set(
      shares
        .filter((s) => s.owner_dept !== null && s.user_dept !== null && s.owner_dept !== s.user_dept)
        .map((s) => s.resource_id),
    ).size;
    const knowledgeSharing = [...perMember.values()].reduce((sum, e) => sum + e.collab, 0);
    return {
      period,
      periodStart: start.toISOString(),
      periodEnd: end.toISOString(),
      summary: {
        totalMembers,
        activeMembers,
        newMembers: members.filter((m) => {
          const joined = m.joinedAt ?? m.createdAt;
          return joined >= start && joined <= end;
        }).length,
        totalActivity,
        collaborationScore: percent(collaborating, totalMembers),
      },
      memberActivity: members.map((m) => {
        const entry = perMember.get(m.id) ?? { logins: 0, executions: 0, created: 0, collab: 0 };
        return {
          userId: m.id,
          name: m.name ?? m.email,
          role: m.role,
          activity: {
            logins: entry.logins,
            endpointExecutions: entry.executions,
            resourcesCreated: entry.created,
            collaborations: entry.collab,
          },
        };
      }),
      teamCollaboration: { sharedEndpoints, crossTeamProjects: crossTeam, knowledgeSharing },
      trends: {
        activityGrowth:
          previousTotal === 0
            ? totalActivity > 0
              ? 100
              : 0
            : Math.round(((totalActivity - previousTotal) / previousTotal) * 1000) / 10,
        memberEngagement: percent(activeMembers, totalMembers),
        retentionRate: previousActive.size === 0 ? 100 : percent(retained, previousActive.size),
      },
    };
  }
}

import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { UsageRecords } from '../usage/records.ts';
import type { AccessControl, Actor, MemberAccess } from './access.ts';

export interface ComputeHoursUse {
  max: number | null;
  used: number;
  remaining: number | null;
  periodStart: Date;
  periodEnd: Date;
}

const round = (hours: number) => Math.round(hours * 1000) / 1000;

/**
 * The role limitation maxComputeHours: GPU-hours a member may use per calendar month (UTC), counted from
 * the metered usage (closed sessions in usage_records and open cluster sessions up to now) attributed to
 * the member. Once the member's hours reach the limit no new work of theirs is placed (clusters created
 * or started, endpoints created, training jobs created or resumed: 403 LIMIT_EXCEEDED); work already
 * running is not stopped.
 */
export class ComputeHoursLimit {
  constructor(private readonly deps: { records: UsageRecords; clock: Clock; access: AccessControl }) {}

  private period(now: Date): { start: Date; end: Date } {
    const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
    return { start, end };
  }

  async use(member: MemberAccess): Promise<ComputeHoursUse> {
    const now = this.deps.clock.now();
    const { start, end } = this.period(now);
    const items = await this.deps.records.load(member.accountId, start, now, now);
    let used = 0;
    for (const item of items) {
      if (item.userId !== member.userId || item.gpuHours <= 0) continue;
      const start0 = item.startedAt.getTime();
      const end0 = item.endedAt.getTime();
      // The part of the item inside this month.
      const share =
        end0 <= start0
          ? 1
          : Math.max(0, Math.min(end0, now.getTime()) - Math.max(start0, start.getTime())) / (end0 - start0);
      used += item.gpuHours * share;
    }
    const max = this.deps.access.limitations(member).maxComputeHours ?? null;
    return {
      max,
      used: round(used),
      remaining: max === null ? null : round(Math.max(0, max - used)),
      periodStart: start,
      periodEnd: end,
    };
  }

  /**
   * Why a member's running work is past their role's maxComputeHours (shown as its status reason: it goes
   * on, but nothing new of theirs is placed), or null while below it or without such a limit.
   */
  async reachedReason(accountId: string, userId: string): Promise<string | null> {
    const member = await this.deps.access.load(accountId, userId);
    if (!member || this.deps.access.limitations(member).maxComputeHours === undefined) return null;
    const use = await this.use(member);
    if (use.max === null || use.used < use.max) return null;
    return (
      `compute-hours limit reached: ${use.used} of the ${use.max} GPU-hours a month role ${member.role} ` +
      `allows (maxComputeHours); this keeps running, but nothing new is placed until ${use.periodEnd.toISOString()}`
    );
  }

  /** Refuses new placement for a member whose GPU-hours this month reached their role's limit. */
  async assertBelow(actor: Actor, what: string): Promise<void> {
    const member = await this.deps.access.caller(actor);
    if (this.deps.access.limitations(member).maxComputeHours === undefined) return;
    const use = await this.use(member);
    if (use.max === null || use.used < use.max) return;
    throw new ApiError(
      'LIMIT_EXCEEDED',
      `role ${member.role} allows ${use.max} GPU-hours a month (maxComputeHours) and ${use.used} are used: ` +
        `no new ${what} until ${use.periodEnd.toISOString()}; running work goes on`,
      {
        limit: 'maxComputeHours',
        max: use.max,
        current: use.used,
        role: member.role,
        periodStart: use.periodStart.toISOString(),
        periodEnd: use.periodEnd.toISOString(),
      },
    );
  }
}

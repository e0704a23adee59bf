import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Resource } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { AccessControl, Actor, MemberAccess } from './access.ts';
import type { ActivityTracker } from './activity.ts';
import { type LimitationName, resourceTypeOf } from './roles.ts';

const LIMIT_OF_TYPE: Record<string, LimitationName> = { cluster: 'maxClusters', endpoint: 'maxEndpoints' };

export interface RegisterInput {
  id: string;
  name: string;
  /** Defaults to the type the id's prefix names (cluster_ → cluster, ep_ → endpoint, ...). */
  type?: string | undefined;
}

/**
 * The directory of customer resources: which account and member own each cluster, endpoint, dataset,
 * job. Areas register a resource when they create it (role limitations maxClusters/maxEndpoints are
 * enforced here) and remove it when it is deleted; shares and grants refer to these ids, and the access
 * layer reads ownership from here.
 */
export class ResourceDirectory {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
    private readonly activity: ActivityTracker,
  ) {}

  /**
   * The member `actor` is, once their role allows them one more resource of `type` (maxClusters,
   * maxEndpoints): the check register makes, for an area that writes the directory row itself in the
   * statement that creates the resource (clusters/create-sql.ts).
   */
  async admit(actor: Actor, type: string): Promise<MemberAccess> {
    const member = await this.access.caller(actor);
    const limit = LIMIT_OF_TYPE[type];
    // Counted only for a role that has the limit: the common create pays no read for it.
    if (limit && member.resolved.limitations[limit] !== undefined) {
      const current = await this.db.prisma.resource.count({
        where: { accountId: member.accountId, ownerId: member.userId, type, deletedAt: null },
      });
      this.access.assertWithinLimit(member, limit, current);
    }
    return member;
  }

  async register(actor: Actor, input: RegisterInput): Promise<Resource> {
    const type = input.type ?? resourceTypeOf(input.id);
    if (!type) throw new Error(`register resource ${input.id}: unknown id prefix and no type given`);
    const member = await this.admit(actor, type);
    const row = await this.db.prisma.resource.create({
      data: {
        id: input.id,
        accountId: member.accountId,
        type,
        name: input.name,
        ownerId: member.userId,
        createdAt: this.clock.now(),
      },
    });
    await this.activity.record({
      accountId: member.accountId,
      userId: member.userId,
      kind: 'resource_created',
      resourceType: type,
      resourceId: input.id,
    });
    return row;
  }

  async get(accountId: string, id: string): Promise<Resource> {
    const row = await this.access.findResource(accountId, id);
    if (!row)
      throw new ApiError('RESOURCE_NOT_FOUND', `no resource ${id} in this account`, { resourceId: id });
    return row;
  }

  /** Marks the resource deleted and ends its shares. */
  async remove(accountId: string, id: string): Promise<void> {
    const now = this.clock.now();
    await this.db.prisma.$transaction([
      this.db.prisma.resource.updateMany({
        where: { accountId, id, deletedAt: null },
        data: { deletedAt: now },
      }),
      this.db.prisma.resourceShare.updateMany({
        where: { accountId, resourceId: id, status: 'active' },
        data: { status: 'revoked', revokedAt: now },
      }),
    ]);
  }

  /** Records an execution on a resource (serverless request, job run) for activity reports. */
  async recordExecution(accountId: string, userId: string, resourceId: string): Promise<void> {
    await this.activity.record({
      accountId,
      userId,
      kind: 'execution',
      resourceType: resourceTypeOf(resourceId),
      resourceId,
    });
  }
}

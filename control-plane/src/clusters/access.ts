import { ApiError } from '@anvil/shared';
import type { AccessControl, Actor, Decision, MemberAccess } from '../accounts/access.ts';
import type { RolePermission } from '../accounts/roles.ts';
import type { Cluster } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';

/**
 * The one place deciding whether a caller may touch a cluster. A cluster of another account, a deleted
 * one or an unknown id is 404 CLUSTER_NOT_FOUND, so ids never reveal other accounts' clusters; inside
 * the account, the member's role, grants and shares decide (403 INSUFFICIENT_PERMISSIONS).
 */
export class ClusterAccess {
  constructor(
    private readonly db: Database,
    private readonly access: AccessControl,
  ) {}

  async require(actor: Actor, clusterId: string, permission: RolePermission): Promise<Cluster> {
    const cluster = await this.db.prisma.cluster.findFirst({
      where: { id: clusterId, accountId: actor.principal.accountId, deletedAt: null },
    });
    if (!cluster) throw notFound(clusterId);
    // A cluster not yet (or no longer) in the resource directory is checked on the scope alone.
    const listed = await this.access.findResource(cluster.accountId, cluster.id);
    await this.access.require(actor, {
      permission,
      scope: 'clusters',
      resourceId: listed ? cluster.id : undefined,
    });
    return cluster;
  }

  /**
   * The same decision for a member acting without an API key (SSH relay, web terminal reconnects): on
   * the cluster as a resource, so ownership, team management, grants and shares count. A cluster not in
   * the resource directory is judged with the owner recorded on the cluster row. Never throws.
   */
  async decideForMember(
    cluster: Cluster,
    userId: string,
    permission: RolePermission,
  ): Promise<Decision & { member: MemberAccess | null }> {
    const member = await this.access.load(cluster.accountId, userId);
    if (!member) {
      return {
        allowed: false,
        source: null,
        role: 'none',
        reason: 'not a member of the account',
        member: null,
      };
    }
    const resource = (await this.access.findResource(cluster.accountId, cluster.id)) ?? {
      id: cluster.id,
      accountId: cluster.accountId,
      type: 'cluster',
      name: cluster.name,
      ownerId: cluster.ownerId,
      createdAt: cluster.createdAt,
      deletedAt: null,
    };
    return { ...(await this.access.decide(member, permission, 'clusters', resource)), member };
  }
}

export function notFound(clusterId: string): ApiError {
  return new ApiError('CLUSTER_NOT_FOUND', `no cluster ${clusterId} in this account`, {
    cluster_id: clusterId,
    suggestion: 'list your clusters with GET /v1/clusters',
  });
}

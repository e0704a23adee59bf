import { ApiError, newId } from '@anvil/shared';
import type { Inventory, WorkloadStatus } from '@anvil/shared/protocol';
import type { Actor } from '../accounts/access.ts';
import type { AccountServices } from '../accounts/index.ts';
import type { Clock } from '../auth/clock.ts';
import { closeSession } from '../billing/sessions.ts';
import type { Cluster, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Fleet } from '../fleet/hosts/fleet.ts';
import { requestedLimits } from '../fleet/workloads/limits.ts';
import { validSpec, type WorkloadSpecInput } from '../fleet/workloads/workloads.ts';
import { requireOwnImage } from '../images/snapshot-images.ts';
import type { Logger } from '../logger.ts';
import { type Allocator, TX_OPTIONS } from '../scheduler/allocator.ts';
import type { GpuType } from '../scheduler/gpu-types.ts';
import type { PlacementRequest } from '../scheduler/placement.ts';
import type { Signal } from '../util/signal.ts';
import { ClusterAccess, notFound } from './access.ts';
import { type ClusterCreation, clusterDraft, type NewCluster } from './creation.ts';
import { snapshotSource } from './from-snapshot.ts';
import {
  type BillingCutoff,
  DELETE_PHASES,
  type DeleteOptions,
  type Operation,
  STOP_PHASES,
  type StopOptions,
} from './operation.ts';
import {
  type CreateClusterBody,
  type ListQuery,
  type PortRequest,
  resolveCreate,
  type TemplateResolverLike,
} from './requests.ts';
import { snapshotCleanupOf } from './snapshots.ts';
import { checkNotifyUsers, pendingNotifications } from './stop-notifications.ts';
import { type ActualPorts, type ClusterView, clusterView, costOf, type StorageQuota } from './view.ts';
import type { ClusterViewParts } from './view-parts.ts';

/** Where a cluster's volume is mounted in its container (RunPod's convention). */
export const VOLUME_PATH = '/workspace';

export interface ClusterServiceDeps {
  db: Database;
  clock: Clock;
  fleet: Fleet;
  accounts: AccountServices;
  allocator: Allocator;
  /** The create statement (creation.ts). */
  creation: ClusterCreation;
  templates?: TemplateResolverLike | null;
  parts?: ClusterViewParts;
  /** The clusters component's logger; default silent. */
  logger?: Logger;
  /** Told after a change that frees capacity or needs the supervisor (placement, operations). */
  changed: Signal;
}

type Tx = Prisma.TransactionClient;

export function placementRequestOf(cluster: Cluster, pinned: boolean): PlacementRequest {
  return {
    gpuType: cluster.gpuType as GpuType,
    gpuCount: cluster.gpuCount,
    cpuCores: cluster.cpuCores,
    memoryGb: cluster.memoryGb,
    storageGb: cluster.storageGb,
    region: pinned ? null : cluster.region,
    hostId: pinned ? cluster.hostId : null,
  };
}

/**
 * Clusters: create (placed at once, or pending until capacity frees), read, list, start, and the
 * acceptance of stop and delete (their phases are executed by ClusterOperations). Every state lives in
 * the clusters row; the container is the workload with the cluster's id (contract 1).
 */
export class ClusterService {
  readonly access: ClusterAccess;
  readonly #templates: TemplateResolverLike | null;
  readonly #parts: ClusterViewParts;
  readonly #ensuring = new Set<string>();

  constructor(private readonly d: ClusterServiceDeps) {
    this.access = new ClusterAccess(d.db, d.accounts.access);
    this.#templates = d.templates ?? null;
    this.#parts = d.parts ?? {};
  }

  // ---- create

  async create(actor: Actor, body: CreateClusterBody): Promise<Cluster> {
    const accountId = actor.principal.accountId;
    await this.d.accounts.access.require(actor, { permission: 'write', scope: 'clusters' });
    let template = null;
    if (body.template_id !== undefined) {
      if (!this.#templates) {
        throw new ApiError('TEMPLATE_NOT_FOUND', `no template ${body.template_id}`, {
          template_id: body.template_id,
        });
      }
      template = await this.#templates.resolveForCluster(accountId, body.template_id);
    }
    const now = this.d.clock.now();
    let snapshot: { image: string; hostId: string } | null = null;
    if (body.from_snapshot !== undefined) {
      snapshot = await snapshotSource(this.d, accountId, body.from_snapshot);
      if (body.docker_image !== undefined && body.docker_image.toLowerCase() !== snapshot.image) {
        throw new ApiError(
          'VALIDATION_ERROR',
          'give docker_image or from_snapshot, not two different images',
          {
            field: 'docker_image',
            reason: 'differs from from_snapshot',
          },
        );
      }
      body = { ...body, docker_image: snapshot.image };
    }
    const input = resolveCreate(
      body,
      template,
      now,
      await this.d.accounts.settings.createDefaults(accountId),
    );
    requireOwnImage(accountId, input.dockerImage);
    const id = newId('cluster');
    await this.d.accounts.computeHours.assertBelow(actor, 'clusters');
    // The role's maxClusters; the directory row is written with the cluster (it makes it shareable).
    const member = await this.d.accounts.resources.admit(actor, 'cluster');
    const cluster: NewCluster = {
      id,
      accountId,
      ownerId: member.userId,
      name: input.name,
      description: input.description,
      projectId: input.projectId,
      templateId: input.templateId,
      dockerImage: input.dockerImage,
      command: input.command,
      env: input.env as Record<string, string>,
      ports: input.ports as unknown[],
      sshEnabled: input.sshEnabled,
      expiresAt: input.expiresAt,
      createdAt: now,
    };
    const draft = clusterDraft(cluster, input);
    const request = placementRequestOf(draft, false);
    const options = {
      request: snapshot ? { ...request, region: null, hostId: snapshot.hostId } : request,
      spec: validSpec(id, workloadSpecOf(draft, [])),
      pendingReason: pendingReason(draft, false),
      region: input.region,
      // A pending cluster is placed later on any host, where its snapshot is not: refused now instead.
      placedOnly: snapshot !== null,
    };
    // One statement: registered, inserted and placed (or pending), committed together, or nothing written.
    let outcome = await this.d.creation.create(cluster, options);
    if (outcome.kind === 'refused' && !outcome.couldFit) {
      // An inventory may have grown or a host joined since the capacity rows were synced: once more.
      await this.d.allocator.sync();
      outcome = await this.d.creation.create(cluster, options);
    }
    if (outcome.kind === 'refused') {
      if (!outcome.couldFit) {
        const verdict = await this.d.allocator.classify(options.request);
        throw new ApiError(
          'INSUFFICIENT_RESOURCES',
          `no host could ever fit ${input.gpuCount} x ${input.gpuType}${input.region ? ` in ${input.region}` : ''} with ${input.cpuCores} CPU cores, ${input.memoryGb} GB memory and ${input.storageGb} GB storage`,
          {
            requestedGpuType: input.gpuType,
            availableGpuTypes: verdict.kind === 'impossible' ? verdict.availableGpuTypes : [],
            requestedGpuCount: input.gpuCount,
            region: input.region,
          },
        );
      }
      throw new ApiError(
        'CONFLICT',
        `the host holding snapshot ${snapshot?.image} has no room for ${input.gpuCount} x ${input.gpuType} now`,
        { field: 'from_snapshot', host_id: snapshot?.hostId },
      );
    }
    this.d.changed.notify();
    if (outcome.kind === 'placed') {
      // Committed: the host's agent gets its new desired set now, without this answer waiting for it.
      void this.d.fleet.events.desiredChanged(outcome.placement.hostId);
      return outcome.cluster;
    }
    // No host had room at that moment (or each was locked by another create): the full attempt, which
    // waits for locked hosts, syncs new hosts, then queues it and reserves a host for the queue's head.
    // (The supervisor, kicked above, may place it first: then this is `gone`, and the row says where.)
    const placed = await this.d.allocator.allocate(id, options.request);
    if (placed.kind === 'placed') await this.ensureWorkload(id);
    return this.row(id);
  }

  // ---- workload

  /**
   * Makes the cluster's workload match its placement and want to run: created on first placement,
   * its spec updated (GPU indices may differ after a restart) and desired set to running otherwise.
   */
  async ensureWorkload(clusterId: string): Promise<void> {
    // The create request and the supervisor may both get here at once: one in this process is enough
    // (another replica doing the same is handled below, by the workload id's uniqueness).
    if (this.#ensuring.has(clusterId)) return;
    this.#ensuring.add(clusterId);
    try {
      await this.#ensureWorkload(clusterId);
    } finally {
      this.#ensuring.delete(clusterId);
    }
  }

  async #ensureWorkload(clusterId: string): Promise<void> {
    const cluster = await this.row(clusterId);
    if (cluster.status !== 'starting' || !cluster.hostId || cluster.gpuIndices.length === 0) return;
    const host = await this.d.db.prisma.host.findUnique({ where: { id: cluster.hostId } });
    const devices = (host?.inventory as Inventory | null)?.gpus?.devices ?? [];
    const spec = workloadSpecOf(
      cluster,
      cluster.gpuIndices.map((index) => ({
        index,
        uuid: devices.find((d) => d.index === index)?.uuid ?? `GPU-index-${index}`,
      })),
    );
    const { workloads } = this.d.fleet;
    const existing = await this.d.db.prisma.workload.findUnique({ where: { id: clusterId } });
    if (!existing) {
      try {
        await workloads.create({
          id: clusterId,
          hostId: cluster.hostId,
          kind: 'cluster',
          ownerAccountId: cluster.accountId,
          spec,
        });
      } catch (error) {
        // Another replica (or the supervisor) created it a moment ago.
        if (!(await this.d.db.prisma.workload.findUnique({ where: { id: clusterId } }))) throw error;
      }
      return;
    }
    const current = existing.spec as unknown as WorkloadSpecInput;
    if (JSON.stringify(current.gpus) !== JSON.stringify(spec.gpus) || current.image !== spec.image) {
      await workloads.updateSpec(clusterId, spec);
    }
    if (existing.desired !== 'running') await workloads.setDesired(clusterId, 'running');
  }

  // ---- read

  async row(id: string): Promise<Cluster> {
    const cluster = await this.d.db.prisma.cluster.findUnique({ where: { id } });
    if (!cluster || cluster.deletedAt) throw notFound(id);
    return cluster;
  }

  async get(actor: Actor, id: string): Promise<Cluster> {
    return this.access.require(actor, id, 'read');
  }

  async views(clusters: Cluster[], withMetrics = true): Promise<ClusterView[]> {
    if (clusters.length === 0) return [];
    const ids = clusters.map((c) => c.id);
    const totals = await this.closedTotals(ids);
    const workloads = await this.d.db.prisma.workload.findMany({
      where: { id: { in: ids } },
      select: { id: true, actualStatus: true },
    });
    const ports = new Map<string, ActualPorts>();
    const problems = new Map<string, string>();
    const statuses = new Map<string, WorkloadStatus | null>();
    for (const w of workloads) {
      const status = w.actualStatus as WorkloadStatus | null;
      statuses.set(w.id, status);
      // A running container's error is the agent's measure of a problem it keeps running with (disk over quota).
      if (status?.phase === 'running' && status.error) problems.set(w.id, status.error);
      ports.set(
        w.id,
        new Map((status?.ports ?? []).map((p) => [`${p.containerPort}/${p.protocol}`, p.hostPort])),
      );
    }
    // Running work of a member past their role's maxComputeHours goes on, and says why nothing new starts.
    const ownerKey = (c: Cluster) => `${c.accountId}:${c.ownerId}`;
    const owners = new Map(clusters.filter((c) => c.status === 'running').map((c) => [ownerKey(c), c]));
    const limitReasons = new Map<string, string | null>(
      await Promise.all(
        [...owners].map(
          async ([key, c]) =>
            [key, await this.d.accounts.computeHours.reachedReason(c.accountId, c.ownerId)] as const,
        ),
      ),
    );
    for (const cluster of clusters) {
      const reason = cluster.status === 'running' ? limitReasons.get(ownerKey(cluster)) : null;
      if (reason && !problems.has(cluster.id)) problems.set(cluster.id, reason);
    }
    // Whether each placed cluster's host bounds storage_gb (overlay2 on xfs with pquota) or only measures it.
    const hostIds = [...new Set(clusters.map((c) => c.hostId).filter((id): id is string => id !== null))];
    const hosts =
      hostIds.length === 0
        ? []
        : await this.d.db.prisma.host.findMany({
            where: { id: { in: hostIds } },
            select: { id: true, inventory: true },
          });
    const quotas = new Map(
      hosts.map((h) => {
        const quota = (h.inventory as { isolation?: { diskQuota?: StorageQuota } } | null)?.isolation
          ?.diskQuota;
        return [h.id, quota ? { enforced: quota.enforced, reason: quota.reason ?? null } : null] as const;
      }),
    );
    const now = this.d.clock.now();
    return Promise.all(
      clusters.map((cluster) =>
        clusterView(cluster, {
          closedTotal: totals.get(cluster.id) ?? 0,
          now,
          parts: this.#parts,
          actualPorts: ports.get(cluster.id) ?? new Map(),
          runningProblem: problems.get(cluster.id) ?? null,
          storageQuota: cluster.hostId ? (quotas.get(cluster.hostId) ?? null) : null,
          actualStatus: statuses.get(cluster.id) ?? null,
          withMetrics,
        }),
      ),
    );
  }

  async view(cluster: Cluster): Promise<ClusterView> {
    return (await this.views([cluster]))[0]!;
  }

  private async closedTotals(ids: string[]): Promise<Map<string, number>> {
    const sums = await this.d.db.prisma.usageRecord.groupBy({
      by: ['resourceId'],
      where: { resourceId: { in: ids }, resourceType: 'cluster' },
      _sum: { cost: true },
    });
    return new Map(sums.map((s) => [s.resourceId, s._sum.cost ?? 0]));
  }

  /** The caller's clusters (never another account's), filtered, sorted and paginated. */
  async list(actor: Actor, query: ListQuery): Promise<{ clusters: Cluster[]; total: number }> {
    await this.d.accounts.access.require(actor, { permission: 'read', scope: 'clusters' });
    const where: Prisma.ClusterWhereInput = {
      accountId: actor.principal.accountId,
      deletedAt: null,
      ...(query.status ? { status: query.status } : {}),
      ...(query.gpuType ? { gpuType: query.gpuType } : {}),
      ...(query.region ? { region: query.region } : {}),
      ...(query.projectId ? { projectId: query.projectId } : {}),
      ...(query.templateId ? { templateId: query.templateId } : {}),
      gpuCount: {
        ...(query.minGpuCount !== null ? { gte: query.minGpuCount } : {}),
        ...(query.maxGpuCount !== null ? { lte: query.maxGpuCount } : {}),
      },
      createdAt: {
        ...(query.createdAfter ? { gte: query.createdAfter } : {}),
        ...(query.createdBefore ? { lte: query.createdBefore } : {}),
      },
      ...(query.search
        ? {
            OR: [
              { name: { contains: query.search, mode: 'insensitive' } },
              { description: { contains: query.search, mode: 'insensitive' } },
              { id: query.search },
            ],
          }
        : {}),
    };
    const skip = (query.page - 1) * query.limit;
    const total = await this.d.db.prisma.cluster.count({ where });
    if (query.sortBy === 'cost') {
      // Cost is computed (closed sessions + the open one): sorted here, over the account's matching clusters.
      const all = await this.d.db.prisma.cluster.findMany({ where });
      const totals = await this.closedTotals(all.map((c) => c.id));
      const now = this.d.clock.now();
      const cost = new Map(all.map((c) => [c.id, costOf(c, totals.get(c.id) ?? 0, now).total_cost]));
      const sign = query.sortOrder === 'asc' ? 1 : -1;
      all.sort((a, b) => sign * ((cost.get(a.id) ?? 0) - (cost.get(b.id) ?? 0)) || a.id.localeCompare(b.id));
      return { clusters: all.slice(skip, skip + query.limit), total };
    }
    const field = { created_at: 'createdAt', name: 'name', status: 'status', gpu_count: 'gpuCount' }[
      query.sortBy
    ];
    const clusters = await this.d.db.prisma.cluster.findMany({
      where,
      orderBy: [{ [field]: query.sortOrder }, { id: query.sortOrder }],
      skip,
      take: query.limit,
    });
    return { clusters, total };
  }

  // ---- start

  /** stopped or error → pending → starting (placed again on the host holding its volume, when it has one). */
  async start(actor: Actor, id: string): Promise<Cluster> {
    const cluster = await this.access.require(actor, id, 'execute');
    if (cluster.status === 'running' || cluster.status === 'starting' || cluster.status === 'pending')
      return cluster;
    await this.d.accounts.computeHours.assertBelow(actor, 'clusters');
    if (cluster.status !== 'stopped' && cluster.status !== 'error') {
      throw invalidState(
        cluster,
        ['stopped', 'error'],
        'wait for the current operation to finish, then start it',
      );
    }
    const updated = await this.d.db.prisma.cluster.updateMany({
      where: { id, status: { in: ['stopped', 'error'] } },
      data: { status: 'pending', statusReason: null },
    });
    if (updated.count === 0) return this.row(id);
    await this.placePending(id);
    return this.row(id);
  }

  /**
   * Waits (polling the row) until the cluster's stop or delete completed or `timeoutMs` passed, and
   * returns the row as it is then. A deleted cluster's last row is returned too.
   */
  async waitForOperation(id: string, timeoutMs: number): Promise<Cluster> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const row = await this.d.db.prisma.cluster.findUnique({ where: { id } });
      if (!row) throw notFound(id);
      if ((row.status !== 'stopping' && row.status !== 'deleting') || Date.now() >= until) return row;
      this.d.changed.notify();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /**
   * Places the pending clusters `ids` in one batch, in the order given (scheduler: Allocator.placeInOrder);
   * returns the ids placed (their workloads are then on their way). Those it did not place are left as they
   * are, for placePending (which queues them and keeps their reservations).
   */
  async placeBatch(ids: readonly string[]): Promise<Set<string>> {
    const rows = await this.d.db.prisma.cluster.findMany({
      where: { id: { in: [...ids] }, status: 'pending', deletedAt: null },
    });
    const byId = new Map(rows.map((cluster) => [cluster.id, cluster]));
    const clusters = ids.flatMap((id) => byId.get(id) ?? []);
    const outcomes = await this.d.allocator.placeInOrder(
      clusters.map((cluster) => ({
        clusterId: cluster.id,
        // A cluster that ran before is pinned to the host holding its volume.
        request: placementRequestOf(cluster, cluster.hostId !== null),
      })),
    );
    const placed = new Set<string>();
    for (const [i, outcome] of outcomes.entries()) {
      if (outcome?.kind !== 'placed') continue;
      const id = clusters[i]!.id;
      await this.ensureWorkload(id);
      placed.add(id);
    }
    return placed;
  }

  /** Tries to place one pending cluster; true when it was placed (its workload is then on its way). */
  async placePending(id: string): Promise<boolean> {
    const cluster = await this.row(id);
    if (cluster.status !== 'pending') return false;
    // A cluster that ran before is pinned to the host holding its volume.
    const hasWorkload = cluster.hostId !== null;
    const outcome = await this.d.allocator.allocate(id, placementRequestOf(cluster, hasWorkload));
    if (outcome.kind !== 'placed') {
      const reason =
        outcome.kind === 'impossible'
          ? `no host can fit ${cluster.gpuCount} x ${cluster.gpuType}${hasWorkload ? ' on the host holding its volume' : ''}`
          : pendingReason(cluster, hasWorkload);
      if (cluster.statusReason !== reason) {
        await this.d.db.prisma.cluster.updateMany({
          where: { id, status: 'pending' },
          data: { statusReason: reason },
        });
      }
      return false;
    }
    await this.ensureWorkload(id);
    return true;
  }

  // ---- stop and delete (accepted here, executed by ClusterOperations)

  async stop(actor: Actor, id: string, options: StopOptions): Promise<Cluster> {
    const cluster = await this.access.require(actor, id, 'execute');
    // Bad input is refused before the state is looked at, and before anything changes.
    const notifyUsers = await checkNotifyUsers(this.d.db, cluster.accountId, options.notify_users);
    if (cluster.status !== 'running') {
      throw invalidState(
        cluster,
        ['running'],
        cluster.status === 'stopped'
          ? 'the cluster is already stopped; start it with POST /v1/clusters/{cluster_id}/start'
          : 'wait until the cluster is running, or delete it',
      );
    }
    const accepted = await this.begin(
      cluster,
      'stop',
      { ...options, notify_users: notifyUsers },
      ['running'],
      {
        requestedBy: actor.principal.userId,
      },
    );
    if (!accepted)
      throw invalidState(await this.row(id), ['running'], 'the cluster changed state; fetch it again');
    this.d.changed.notify();
    return this.row(id);
  }

  /** Any status (but an already deleting one, which answers its progress) → deleting. */
  async delete(
    actor: Actor,
    id: string,
    options: DeleteOptions,
    confirmation: string | undefined,
  ): Promise<Cluster> {
    const cluster = await this.access.require(actor, id, 'write');
    if (confirmation !== 'DELETE') {
      throw new ApiError('CONFIRMATION_REQUIRED', 'deleting a cluster needs confirm_deletion: "DELETE"', {
        required_field: 'confirm_deletion',
        required_value: 'DELETE',
        cluster_id: cluster.id,
        cluster_name: cluster.name,
        warning: 'Deleting removes the container and its volume for good; only snapshots you keep remain.',
      });
    }
    if (cluster.status === 'deleting') return cluster;
    await this.beginDelete(cluster, options, actor.principal.userId);
    return this.row(id);
  }

  /** Also used for expiry (no actor). */
  async beginDelete(
    cluster: Cluster,
    options: DeleteOptions,
    requestedBy: string | null = null,
  ): Promise<boolean> {
    const accepted = await this.begin(
      cluster,
      'delete',
      options,
      ['pending', 'starting', 'running', 'stopping', 'stopped', 'error'],
      { requestedBy },
    );
    this.d.changed.notify();
    return accepted;
  }

  /**
   * Moves the cluster into stopping or deleting with a fresh operation, and closes its billing session
   * at this moment (spec: billing stopped at stop time) — one transaction, so a concurrent stop or
   * delete loses cleanly.
   */
  private async begin(
    cluster: Cluster,
    kind: 'stop' | 'delete',
    options: StopOptions | DeleteOptions,
    from: string[],
    by: { requestedBy: string | null },
  ): Promise<boolean> {
    const now = this.d.clock.now();
    const phases = kind === 'stop' ? [...STOP_PHASES] : [...DELETE_PHASES];
    return this.d.db.prisma.$transaction(async (tx: Tx) => {
      const locked = await tx.$queryRawUnsafe<{ status: string; operation: Operation | null }[]>(
        'SELECT status, operation FROM clusters WHERE id = $1 AND deleted_at IS NULL FOR UPDATE',
        cluster.id,
      );
      const status = locked[0]?.status;
      const previous = locked[0]?.operation ?? null;
      if (!status || !from.includes(status)) return false;
      const session = await closeSession(tx, cluster, now, kind === 'stop' ? 'stopped' : 'deleted');
      const billing: BillingCutoff = {
        cutoff: now.toISOString(),
        session_started_at: session?.startedAt.toISOString() ?? null,
        session_hours: session?.hours ?? 0,
        session_cost: session?.cost ?? 0,
        hourly_rate: cluster.hourlyRate,
        total_cost: null,
      };
      const snapshotName = options.snapshot_name;
      const snapshotEnabled =
        kind === 'stop'
          ? (options as StopOptions).save_state
          : (options as DeleteOptions).create_final_snapshot;
      const operation: Operation = {
        kind,
        phase: phases[0]!,
        phases,
        steps_completed: 0,
        started_at: now.toISOString(),
        phase_started_at: now.toISOString(),
        deadline: new Date(now.getTime() + options.timeout_minutes * 60_000).toISOString(),
        completed_at: null,
        options,
        snapshot: {
          enabled: snapshotEnabled,
          name: snapshotEnabled ? snapshotName : null,
          snapshot_id: null,
          size_bytes: null,
          error: null,
        },
        billing,
        previous_status: status,
        notes: [],
        runner: null,
        lease_until: null,
        requested_by: by.requestedBy,
      };
      if (kind === 'stop') {
        operation.notifications = pendingNotifications((options as StopOptions).notify_users);
      } else {
        operation.snapshot_cleanup = snapshotCleanupOf(options as DeleteOptions);
        // A delete taking over an unfinished stop still owes that stop's notifications: it failed.
        const owed = previous?.kind === 'stop' ? previous.notifications : null;
        if (status === 'stopping' && previous && owed && owed.state !== 'done') {
          operation.notifications = owed;
          operation.interrupted_stop = {
            started_at: previous.started_at,
            completed_at: null,
            options: previous.options as StopOptions,
            snapshot: previous.snapshot,
            notes: previous.notes,
            requested_by: previous.requested_by ?? null,
          };
        }
      }
      await tx.cluster.update({
        where: { id: cluster.id },
        data: {
          status: kind === 'stop' ? 'stopping' : 'deleting',
          statusReason:
            kind === 'stop'
              ? (options as StopOptions).stop_reason
              : (options as DeleteOptions).deletion_reason,
          operation: operation as unknown as Prisma.InputJsonValue,
          updatedAt: now,
        },
      });
      return true;
    }, TX_OPTIONS);
  }

  /** The cluster fails: billing closed, GPUs released, the reason kept (image pull failed, container exited). */
  async fail(clusterId: string, reason: string): Promise<void> {
    const now = this.d.clock.now();
    const changed = await this.d.db.prisma.$transaction(async (tx: Tx) => {
      const locked = await tx.$queryRawUnsafe<{ status: string }[]>(
        'SELECT status FROM clusters WHERE id = $1 AND deleted_at IS NULL FOR UPDATE',
        clusterId,
      );
      if (!locked[0] || !['starting', 'running'].includes(locked[0].status)) return false;
      const cluster = await tx.cluster.findUniqueOrThrow({ where: { id: clusterId } });
      await closeSession(tx, cluster, now, 'error');
      await this.d.allocator.release(tx, clusterId);
      await tx.cluster.update({
        where: { id: clusterId },
        data: { status: 'error', statusReason: reason, updatedAt: now },
      });
      return true;
    }, TX_OPTIONS);
    if (!changed) return;
    // The container is not left behind to restart on its own; its volume stays for a later start.
    await this.stopFailedContainer(clusterId, reason);
    this.d.changed.notify();
  }

  /**
   * A failed cluster's container set to stopped. The cluster is failed and billed no more either way; a
   * failure is logged, and the supervisor's next pass calls this again for a failed cluster whose container
   * is still wanted running, until it holds.
   */
  async stopFailedContainer(clusterId: string, reason: string | null): Promise<void> {
    try {
      // A failed cluster started again meanwhile wants its container running: left alone.
      const row = await this.d.db.prisma.cluster.findUnique({
        where: { id: clusterId },
        select: { status: true },
      });
      if (row?.status !== 'error') return;
      await this.d.fleet.workloads.setDesired(clusterId, 'stopped');
    } catch (error) {
      this.d.logger?.error(
        { err: error, clusterId, reason },
        'failed cluster: its container could not be set to stopped; retried at the next supervisor pass',
      );
    }
  }
}

function pendingReason(cluster: Cluster, pinned: boolean): string {
  return `waiting for ${cluster.gpuCount} x ${cluster.gpuType} to free up${pinned ? ' on the host holding its volume' : ''}`;
}

export function invalidState(cluster: Cluster, required: string[], suggestion: string): ApiError {
  return new ApiError(
    'INVALID_STATE',
    `cluster ${cluster.id} is ${cluster.status}; this needs ${required.join(' or ')}`,
    {
      current_status: cluster.status,
      required_status: required.length === 1 ? required[0] : required,
      suggestion,
    },
  );
}

/** The container of a cluster (contract 1): its image, command, env, GPUs, limits, ports and volume. */
export function workloadSpecOf(cluster: Cluster, gpus: { index: number; uuid: string }[]): WorkloadSpecInput {
  const ports = (cluster.ports as unknown as PortRequest[]) ?? [];
  return {
    image: cluster.dockerImage,
    command: cluster.command.length > 0 ? cluster.command : null,
    entrypoint: null,
    env: {
      ...(cluster.env as Record<string, string>),
      ANVIL_CLUSTER_ID: cluster.id,
      ANVIL_GPU_COUNT: String(cluster.gpuCount),
    },
    labels: { 'anvil.cluster': cluster.id, 'anvil.account': cluster.accountId },
    gpus,
    accountId: cluster.accountId,
    ...requestedLimits(cluster),
    shmBytes: null,
    ports: ports.map((p) => ({
      containerPort: p.internal_port,
      protocol: p.protocol,
      hostPort: null,
      hostIp: null,
    })),
    volume: { containerPath: VOLUME_PATH },
    // A cluster whose container exits is in error (with the exit code), not silently restarted.
    restartPolicy: { name: 'no', maxRetries: 0 },
    stopGraceSeconds: 10,
  };
}

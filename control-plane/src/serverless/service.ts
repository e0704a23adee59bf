import { ApiError, newId } from '@anvil/shared';
import type { Actor } from '../accounts/access.ts';
import type { AccountServices } from '../accounts/index.ts';
import type { RolePermission } from '../accounts/roles.ts';
import type { Clock } from '../auth/clock.ts';
import type { Endpoint, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { requireOwnImage } from '../images/snapshot-images.ts';
import type { Logger } from '../logger.ts';
import { TX_OPTIONS } from '../scheduler/allocator.ts';
import type { TemplateResolver } from '../templates/resolve.ts';
import type { Signal } from '../util/signal.ts';
import {
  type ConfigurationInput,
  checkBound,
  type EndpointConfiguration,
  initialTarget,
  mergeConfiguration,
} from './configuration.ts';
import type { JobQueue } from './jobs.ts';
import { configurationOf, type EndpointMetrics, viewEndpoint, type WorkerCounts } from './view.ts';
import type { WorkerPlacer } from './workers.ts';

type Tx = Prisma.TransactionClient;

/** Metrics of the endpoint object cover this window (spec: last 30 days). */
export const METRICS_WINDOW_MS = 30 * 86_400_000;

export interface CreateEndpointInput {
  name: string;
  templateId?: string | undefined;
  image?: string | undefined;
  command?: string[] | string | undefined;
  workerPort?: number | undefined;
  gpuType: string;
  gpuCount?: number | undefined;
  configuration?: ConfigurationInput | undefined;
}

export interface ListEndpointsQuery {
  status?: string | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
}

export function endpointNotFound(endpointId: string): ApiError {
  return new ApiError('ENDPOINT_NOT_FOUND', `no endpoint ${endpointId} in this account`, {
    endpointId,
    suggestion: 'list your endpoints with GET /v2/endpoints',
  });
}

function invalid(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason });
}

/**
 * Serverless endpoints of an account: create, read, list, update, delete. An endpoint of another
 * account, a deleted one or an unknown id is 404 ENDPOINT_NOT_FOUND; inside the account the member's role,
 * grants and shares decide (scope endpoints: read to look, write to change, execute to run jobs).
 */
export class EndpointService {
  constructor(
    private readonly d: {
      db: Database;
      clock: Clock;
      accounts: AccountServices;
      templates: TemplateResolver | null;
      jobs: JobQueue;
      placer: WorkerPlacer;
      /** Rebuilds the capacity index (hosts that joined since): before a create is refused as impossible. */
      syncCapacity: () => Promise<void>;
      publicUrl: string;
      logger: Logger;
      /** Told of each change the supervisor should act on now rather than at its next pass. */
      changed: Signal;
    },
  ) {}

  async require(actor: Actor, endpointId: string, permission: RolePermission): Promise<Endpoint> {
    const endpoint = await this.d.db.prisma.endpoint.findFirst({
      where: { id: endpointId, accountId: actor.principal.accountId, deletedAt: null },
    });
    if (!endpoint) throw endpointNotFound(endpointId);
    const listed = await this.d.accounts.access.findResource(endpoint.accountId, endpoint.id);
    await this.d.accounts.access.require(actor, {
      permission,
      scope: 'endpoints',
      resourceId: listed ? endpoint.id : undefined,
      listed: listed ?? undefined,
    });
    return endpoint;
  }

  async create(actor: Actor, input: CreateEndpointInput) {
    const accountId = actor.principal.accountId;
    await this.d.accounts.access.require(actor, { permission: 'write', scope: 'endpoints' });
    const name = input.name.trim();
    if (name === '') throw invalid('name', 'must not be blank');
    checkBound('gpuCount', input.gpuCount);
    const template = input.templateId ? await this.#template(accountId, input.templateId) : null;
    const image = input.image ?? template?.dockerImage;
    if (!image) throw invalid('image', 'is required when no templateId is given');
    const given = input.configuration ?? {};
    const configuration = mergeConfiguration(null, {
      ...given,
      environmentVariables: { ...(template?.env ?? {}), ...(given.environmentVariables ?? {}) },
    });
    let command: string[] = [];
    if (typeof input.command === 'string') command = input.command.trim() ? ['sh', '-c', input.command] : [];
    else if (Array.isArray(input.command)) command = input.command;
    else if (template?.startupScript) command = ['sh', '-c', template.startupScript];
    const gpuCount = input.gpuCount ?? 1;
    await this.#assertCouldFit(input.gpuType, gpuCount);
    requireOwnImage(accountId, image, 'dockerImage');
    const id = newId('ep');
    await this.d.accounts.computeHours.assertBelow(actor, 'endpoints');
    // Registering enforces the role's maxEndpoints and makes the endpoint shareable.
    await this.d.accounts.resources.register(actor, { id, name, type: 'endpoint' });
    const now = this.d.clock.now();
    const target = initialTarget(configuration);
    let row: Endpoint;
    try {
      row = await this.d.db.prisma.endpoint.create({
        data: {
          id,
          accountId,
          ownerId: actor.principal.userId,
          name,
          status: target === 0 ? 'inactive' : 'pending',
          templateId: template?.templateId ?? null,
          dockerImage: image,
          command,
          workerPort: input.workerPort ?? 8000,
          gpuType: input.gpuType,
          gpuCount,
          ...columnsOf(configuration),
          targetWorkers: target,
          createdAt: now,
          updatedAt: now,
        },
      });
    } catch (error) {
      await this.d.accounts.resources.remove(accountId, id);
      throw error;
    }
    this.d.logger.info(
      { endpoint_id: id, account_id: accountId, gpu_type: input.gpuType, target },
      'endpoint created',
    );
    this.d.changed.notify();
    return this.view(row);
  }

  async #template(accountId: string, templateId: string) {
    if (!this.d.templates) {
      throw new ApiError('TEMPLATE_NOT_FOUND', `no template ${templateId}`, { template_id: templateId });
    }
    return this.d.templates.resolveForCluster(accountId, templateId);
  }

  /** No host could ever run one worker: 422 INSUFFICIENT_RESOURCES (busy capacity leaves it pending). */
  async #assertCouldFit(gpuType: string, gpuCount: number): Promise<void> {
    let fit = await this.d.placer.couldEverFit(gpuType, gpuCount);
    if (!fit.couldFit) {
      await this.d.syncCapacity();
      fit = await this.d.placer.couldEverFit(gpuType, gpuCount);
    }
    if (fit.couldFit) return;
    throw new ApiError(
      'INSUFFICIENT_RESOURCES',
      `no host could ever run a worker with ${gpuCount} x ${gpuType}`,
      {
        requestedGpuType: gpuType,
        availableGpuTypes: fit.gpuTypes,
        requestedGpuCount: gpuCount,
      },
    );
  }

  async get(actor: Actor, endpointId: string) {
    return this.view(await this.require(actor, endpointId, 'read'));
  }

  async list(actor: Actor, query: ListEndpointsQuery) {
    await this.d.accounts.access.require(actor, { permission: 'read', scope: 'endpoints' });
    const limit = query.limit ?? 50;
    const offset = query.offset ?? 0;
    const where: Prisma.EndpointWhereInput = {
      accountId: actor.principal.accountId,
      deletedAt: null,
      ...(query.status ? { status: query.status } : {}),
    };
    const [total, rows] = await Promise.all([
      this.d.db.prisma.endpoint.count({ where }),
      this.d.db.prisma.endpoint.findMany({
        where,
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: limit,
        skip: offset,
      }),
    ]);
    return {
      endpoints: await this.views(rows),
      pagination: { total, limit, offset, hasMore: offset + rows.length < total },
    };
  }

  async view(endpoint: Endpoint) {
    return (await this.views([endpoint]))[0]!;
  }

  async views(endpoints: Endpoint[]) {
    if (endpoints.length === 0) return [];
    const ids = endpoints.map((e) => e.id);
    const [metrics, workers] = await Promise.all([this.metrics(ids), this.workerCounts(ids)]);
    return endpoints.map((e) =>
      viewEndpoint(
        e,
        this.d.publicUrl,
        metrics.get(e.id) ?? { totalExecutions: 0, averageLatency: null, lastExecution: null },
        { target: e.targetWorkers, ready: 0, starting: 0, draining: 0, ...workers.get(e.id) },
      ),
    );
  }

  /**
   * Spec metrics over the last 30 days, from the job table: totalExecutions = jobs a worker ran that
   * finished in the window; averageLatency = mean of (completed_at − created_at) in ms over COMPLETED jobs
   * (queue wait plus execution: what a caller waits); lastExecution = the latest completed_at of those.
   */
  async metrics(endpointIds: string[]): Promise<Map<string, EndpointMetrics>> {
    const since = new Date(this.d.clock.now().getTime() - METRICS_WINDOW_MS);
    const rows = await this.d.db.sql.query<{
      endpoint_id: string;
      total: number;
      avg_ms: number | null;
      last: Date | null;
    }>(
      `SELECT endpoint_id, count(*)::int AS total,
              avg(EXTRACT(EPOCH FROM (completed_at - created_at)) * 1000) FILTER (WHERE status = 'COMPLETED')::float8 AS avg_ms,
              max(completed_at) AS last
         FROM endpoint_jobs
        WHERE endpoint_id = ANY($1::text[]) AND started_at IS NOT NULL AND completed_at >= $2
        GROUP BY endpoint_id`,
      [endpointIds, since],
    );
    return new Map(
      rows.map((r) => [
        r.endpoint_id,
        {
          totalExecutions: r.total,
          averageLatency: r.avg_ms === null ? null : Math.round(Number(r.avg_ms)),
          lastExecution: r.last ? new Date(r.last).toISOString() : null,
        },
      ]),
    );
  }

  async workerCounts(endpointIds: string[]): Promise<Map<string, Omit<WorkerCounts, 'target'>>> {
    const rows = await this.d.db.sql.query<{ endpoint_id: string; status: string; n: number }>(
      `SELECT endpoint_id, status, count(*)::int AS n FROM endpoint_workers
        WHERE endpoint_id = ANY($1::text[]) AND status IN ('starting', 'ready', 'draining')
        GROUP BY endpoint_id, status`,
      [endpointIds],
    );
    const out = new Map<string, Omit<WorkerCounts, 'target'>>();
    for (const r of rows) {
      const counts = out.get(r.endpoint_id) ?? { ready: 0, starting: 0, draining: 0 };
      counts[r.status as 'ready' | 'starting' | 'draining'] = r.n;
      out.set(r.endpoint_id, counts);
    }
    return out;
  }

  /**
   * PUT: the configuration given replaces those fields (autoScaling field by field); the endpoint becomes
   * `updating` until the supervisor applied it. Changing environmentVariables or maxConcurrency (both reach
   * the container) replaces the workers one by one: a new one starts, an old one is drained once it is
   * ready; only such a change is refused with 409 ENDPOINT_BUSY while requests are executing. Scaling
   * (workerCount, autoScaling) and timeouts apply at once whatever runs.
   */
  async update(actor: Actor, endpointId: string, input: ConfigurationInput) {
    await this.require(actor, endpointId, 'write');
    const now = this.d.clock.now();
    const updated = await this.d.db.prisma.$transaction(async (tx: Tx) => {
      const locked = await tx.$queryRawUnsafe<{ id: string }[]>(
        'SELECT id FROM endpoints WHERE id = $1 AND deleted_at IS NULL FOR UPDATE',
        endpointId,
      );
      if (locked.length === 0) throw endpointNotFound(endpointId);
      const endpoint = await tx.endpoint.findUniqueOrThrow({ where: { id: endpointId } });
      const current = configurationOf(endpoint);
      const next = mergeConfiguration(current, input);
      const [active] = await tx.$queryRawUnsafe<{ n: number }[]>(
        `SELECT count(*)::int AS n FROM endpoint_jobs WHERE endpoint_id = $1 AND status = 'IN_PROGRESS'`,
        endpointId,
      );
      const activeRequests = active?.n ?? 0;
      const replaceWorkers =
        JSON.stringify(next.environmentVariables) !== JSON.stringify(current.environmentVariables) ||
        next.maxConcurrency !== current.maxConcurrency ||
        next.workerProtocol !== current.workerProtocol;
      // Scaling (workerCount, autoScaling) and the other control-plane settings take effect at once, running
      // requests or not: only a change that reaches the containers rolls the workers.
      if (activeRequests > 0 && replaceWorkers) {
        throw new ApiError(
          'ENDPOINT_BUSY',
          `endpoint ${endpointId} is executing ${activeRequests} request(s) and this change replaces its workers`,
          {
            activeRequests,
            rollingFields: ['environmentVariables', 'maxConcurrency', 'workerProtocol'],
            suggestion:
              'retry once the running requests finished (GET /v2/<endpoint_id>/health shows inProgress); ' +
              'scaling changes (workerCount, autoScaling) apply while requests run',
          },
        );
      }
      const target = next.autoScaling.enabled
        ? Math.min(Math.max(endpoint.targetWorkers, next.autoScaling.minWorkers), next.autoScaling.maxWorkers)
        : next.workerCount;
      return tx.endpoint.update({
        where: { id: endpointId },
        data: {
          ...columnsOf(next),
          status: 'updating',
          statusReason: replaceWorkers
            ? 'replacing workers with the new configuration'
            : 'applying the new configuration',
          configVersion: replaceWorkers ? endpoint.configVersion + 1 : endpoint.configVersion,
          targetWorkers: target,
          updatedAt: now,
        },
      });
    }, TX_OPTIONS);
    this.d.logger.info(
      { endpoint_id: endpointId, config_version: updated.configVersion },
      'endpoint updated',
    );
    this.d.changed.notify();
    return {
      id: updated.id,
      name: updated.name,
      status: 'updating' as const,
      configuration: configurationOf(updated),
      updatedAt: updated.updatedAt.toISOString(),
    };
  }

  /**
   * Deleting: the endpoint is gone at once (404 afterwards); its queued and running jobs are cancelled and
   * its workers' containers removed by the supervisor (a restart carries that on, so nothing is orphaned).
   */
  async delete(actor: Actor, endpointId: string) {
    const endpoint = await this.require(actor, endpointId, 'write');
    const now = this.d.clock.now();
    const cancelled = await this.d.db.prisma.$transaction(async (tx: Tx) => {
      const changed = await tx.endpoint.updateMany({
        where: { id: endpointId, deletedAt: null },
        data: { deletedAt: now, targetWorkers: 0, updatedAt: now },
      });
      if (changed.count === 0) throw endpointNotFound(endpointId);
      return this.d.jobs.cancelAll(tx, endpointId);
    }, TX_OPTIONS);
    await this.d.accounts.resources.remove(endpoint.accountId, endpointId);
    const workers = await this.d.db.prisma.endpointWorker.count({
      where: { endpointId, status: { in: ['starting', 'ready', 'draining'] } },
    });
    this.d.logger.info({ endpoint_id: endpointId, cancelled_jobs: cancelled, workers }, 'endpoint deleted');
    this.d.changed.notify();
    return {
      id: endpointId,
      deleted: true,
      deletedAt: now.toISOString(),
      cancelledJobs: cancelled,
      workersStopping: workers,
    };
  }
}

function columnsOf(config: EndpointConfiguration) {
  return {
    workerCount: config.workerCount,
    maxConcurrency: config.maxConcurrency,
    timeoutSeconds: config.timeoutSeconds,
    env: config.environmentVariables,
    autoScaling: config.autoScaling as unknown as Prisma.InputJsonValue,
    workerProtocol: config.workerProtocol,
  };
}

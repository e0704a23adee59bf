import { ApiError, newId } from '@anvil/shared';
import type { AccessControl, Actor } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import { type ClusterTemplate, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { defaultsOf, type TemplateDefaults, type TemplateResolver, templateNotFound } from './resolve.ts';
import {
  bumpPatch,
  checkResourceBounds,
  compareSemver,
  type ResourceBounds,
  refuseInertFields,
  validationError,
} from './rules.ts';
import { OFFICIAL_TEMPLATES, type OfficialTemplate } from './seed.ts';
import { type TemplateStats, templateView, type UsageStatistics } from './view.ts';

/**
 * Cluster templates (compute spec: Cluster template): official ones (seeded, read-only, visible to every
 * account) and each account's own (visible to that account only). Every published state is kept in
 * cluster_template_versions: version 1.0.0 (or the given one) at creation, then one version per PUT.
 */

export interface DefaultConfigurationInput extends ResourceBounds {
  gpu_type?: string | undefined;
}

export interface PortMappingInput {
  internal_port: number;
  protocol?: 'tcp' | 'udp' | undefined;
  description?: string | undefined;
  required?: boolean | undefined;
}

export interface CreateTemplateInput {
  name: string;
  description: string;
  category: string;
  docker_image: string;
  default_configuration: DefaultConfigurationInput;
  framework?: string | null | undefined;
  project_id?: string | null | undefined;
  environment_variables?: Record<string, string> | undefined;
  startup_script?: string | null | undefined;
  port_mappings?: PortMappingInput[] | undefined;
  required_packages?: string[] | undefined;
  software_versions?: Record<string, string> | undefined;
  gpu_compatible?: boolean | undefined;
  min_resources?: ResourceBounds | null | undefined;
  max_resources?: ResourceBounds | null | undefined;
  compatibility?: Record<string, unknown> | null | undefined;
  tags?: string[] | undefined;
  is_public?: boolean | undefined;
  version?: string | undefined;
  version_notes?: string | null | undefined;
}

export type UpdateTemplateInput = Partial<CreateTemplateInput> & { is_deprecated?: boolean | undefined };

export const TEMPLATE_SORTS = ['name', 'created_at', 'usage_count'] as const;
export type TemplateSort = (typeof TEMPLATE_SORTS)[number];

export interface ListTemplatesQuery {
  category?: string | undefined;
  framework?: string | undefined;
  gpu_compatible?: boolean | undefined;
  official?: boolean | undefined;
  project_id?: string | undefined;
  search?: string | undefined;
  sort_by?: TemplateSort | undefined;
  sort_order?: 'asc' | 'desc' | undefined;
  include_deprecated?: boolean | undefined;
}

const EMPTY_STATS: TemplateStats = { total: 0, active: 0, decided: 0, reached: 0 };

export class TemplateService implements TemplateResolver {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly access: AccessControl,
  ) {}

  // ---- contract 2: cluster creation ----

  async resolveForCluster(accountId: string, templateId: string): Promise<TemplateDefaults> {
    const template = await this.db.prisma.clusterTemplate.findFirst({
      where: { id: templateId, deletedAt: null, OR: [{ accountId }, { accountId: null, official: true }] },
    });
    if (!template) throw templateNotFound(templateId);
    return defaultsOf(template);
  }

  // ---- start-up ----

  /** Seeds the official templates: inserts missing ones, updates those whose seed version changed. */
  async start(): Promise<void> {
    for (const seed of OFFICIAL_TEMPLATES) await this.seedOne(seed);
  }

  private async seedOne(seed: OfficialTemplate): Promise<void> {
    const now = this.clock.now();
    const content = {
      name: seed.name,
      description: seed.description,
      category: seed.category,
      framework: seed.framework,
      version: seed.version,
      versionNotes: seed.versionNotes,
      dockerImage: seed.dockerImage,
      gpuCompatible: true,
      official: true,
      defaultConfiguration: seed.defaultConfiguration as Prisma.InputJsonValue,
      environmentVariables: seed.environmentVariables,
      startupScript: seed.startupScript,
      portMappings: seed.portMappings,
      requiredPackages: seed.requiredPackages,
      softwareVersions: seed.softwareVersions,
      resourceLimits: seed.resourceLimits ?? Prisma.DbNull,
      compatibility: seed.compatibility ?? Prisma.DbNull,
      tags: seed.tags,
      isPublic: true,
    };
    const existing = await this.db.prisma.clusterTemplate.findUnique({ where: { id: seed.id } });
    if (existing && existing.version === seed.version) return;
    await this.db.prisma.$transaction(async (tx) => {
      const row = existing
        ? await tx.clusterTemplate.update({ where: { id: seed.id }, data: { ...content, updatedAt: now } })
        : await tx.clusterTemplate.create({
            data: { id: seed.id, accountId: null, projectId: '', ...content, createdAt: now, updatedAt: now },
          });
      await tx.clusterTemplateVersion.upsert({
        where: { templateId_version: { templateId: row.id, version: row.version } },
        create: versionRow(row, null, now),
        update: {},
      });
    });
  }

  // ---- reads ----

  async list(actor: Actor, query: ListTemplatesQuery) {
    await this.access.require(actor, { permission: 'read', scope: 'clusters' });
    const accountId = actor.principal.accountId;
    const where: Prisma.ClusterTemplateWhereInput = {
      deletedAt: null,
      AND: [{ OR: [{ accountId }, { accountId: null, official: true }] }],
    };
    if (query.category !== undefined) where.category = query.category;
    if (query.framework !== undefined) where.framework = query.framework;
    if (query.gpu_compatible !== undefined) where.gpuCompatible = query.gpu_compatible;
    if (query.official !== undefined) where.official = query.official;
    if (query.project_id !== undefined) where.projectId = query.project_id;
    if (!query.include_deprecated) where.isDeprecated = false;
    if (query.search) {
      const search = query.search;
      (where.AND as Prisma.ClusterTemplateWhereInput[]).push({
        OR: [
          { name: { contains: search, mode: 'insensitive' } },
          { description: { contains: search, mode: 'insensitive' } },
          { dockerImage: { contains: search, mode: 'insensitive' } },
          { tags: { has: search.toLowerCase() } },
        ],
      });
    }
    const rows = await this.db.prisma.clusterTemplate.findMany({ where, orderBy: { id: 'asc' } });
    const [stats, context] = await Promise.all([
      this.statsFor(
        accountId,
        rows.map((r) => r.id),
      ),
      this.viewContext(rows),
    ]);
    const sortBy = query.sort_by ?? 'name';
    const order = query.sort_order ?? (sortBy === 'name' ? 'asc' : 'desc');
    const sign = order === 'asc' ? 1 : -1;
    const byName = (a: ClusterTemplate, b: ClusterTemplate) =>
      a.name.localeCompare(b.name) || a.id.localeCompare(b.id);
    rows.sort((a, b) => {
      let diff = 0;
      if (sortBy === 'created_at') diff = a.createdAt.getTime() - b.createdAt.getTime();
      if (sortBy === 'usage_count') {
        diff = (stats.get(a.id) ?? EMPTY_STATS).total - (stats.get(b.id) ?? EMPTY_STATS).total;
      }
      return diff !== 0 ? sign * diff : sortBy === 'name' ? sign * byName(a, b) : byName(a, b);
    });
    const filtersApplied: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(query)) if (value !== undefined) filtersApplied[key] = value;
    return {
      templates: rows.map((row) => templateView(row, stats.get(row.id) ?? EMPTY_STATS, context)),
      total_count: rows.length,
      filters_applied: { ...filtersApplied, sort_by: sortBy, sort_order: order },
    };
  }

  async get(actor: Actor, templateId: string) {
    await this.access.require(actor, { permission: 'read', scope: 'clusters' });
    const row = await this.findVisible(actor.principal.accountId, templateId);
    return this.viewOf(actor.principal.accountId, row);
  }

  async versions(actor: Actor, templateId: string) {
    await this.access.require(actor, { permission: 'read', scope: 'clusters' });
    const row = await this.findVisible(actor.principal.accountId, templateId);
    const versions = await this.db.prisma.clusterTemplateVersion.findMany({ where: { templateId: row.id } });
    versions.sort((a, b) => compareSemver(b.version, a.version));
    return {
      template_id: row.id,
      current_version: row.version,
      versions: versions.map((v) => ({
        version: v.version,
        version_notes: v.versionNotes,
        created_at: v.createdAt.toISOString(),
        created_by: v.createdById,
        snapshot: v.snapshot as Record<string, unknown>,
      })),
    };
  }

  // ---- changes ----

  async create(actor: Actor, input: CreateTemplateInput) {
    const member = await this.access.require(actor, { permission: 'write', scope: 'clusters' });
    const accountId = member.accountId;
    refuseInertFields(input);
    checkResourceBounds(input.default_configuration, input.min_resources, input.max_resources);
    const now = this.clock.now();
    const data: Prisma.ClusterTemplateUncheckedCreateInput = {
      id: newId('tmpl'),
      accountId,
      projectId: input.project_id ?? '',
      name: input.name,
      description: input.description,
      category: input.category,
      framework: input.framework ?? null,
      version: input.version ?? '1.0.0',
      versionNotes: input.version_notes ?? null,
      dockerImage: input.docker_image,
      gpuCompatible: input.gpu_compatible ?? true,
      official: false,
      defaultConfiguration: configOf(input.default_configuration),
      environmentVariables: input.environment_variables ?? {},
      startupScript: input.startup_script ?? null,
      portMappings: portsOf(input.port_mappings ?? []),
      requiredPackages: input.required_packages ?? [],
      softwareVersions: input.software_versions ?? {},
      resourceLimits: limitsOf(input.min_resources, input.max_resources) ?? Prisma.DbNull,
      compatibility: (input.compatibility as Prisma.InputJsonValue | null | undefined) ?? Prisma.DbNull,
      tags: input.tags ?? [],
      createdById: member.userId,
      isPublic: input.is_public ?? false,
      isDeprecated: false,
      createdAt: now,
      updatedAt: now,
    };
    const row = await this.db.prisma
      .$transaction(async (tx) => {
        const created = await tx.clusterTemplate.create({ data });
        await tx.clusterTemplateVersion.create({ data: versionRow(created, member.userId, now) });
        return created;
      })
      .catch((error: unknown) => {
        throw nameConflict(error, input.name, data.projectId ?? '');
      });
    return this.viewOf(accountId, row);
  }

  async update(actor: Actor, templateId: string, input: UpdateTemplateInput) {
    const member = await this.access.require(actor, { permission: 'write', scope: 'clusters' });
    const current = await this.findOwn(member.accountId, templateId);
    refuseInertFields(input);
    if (Object.values(input).every((value) => value === undefined)) {
      throw validationError('body', 'must change at least one field');
    }
    const version = input.version ?? bumpPatch(current.version);
    if (compareSemver(version, current.version) <= 0) {
      throw validationError('version', `must be greater than the current version ${current.version}`, {
        currentVersion: current.version,
        received: version,
      });
    }
    const limits = asLimits(current.resourceLimits);
    const min = input.min_resources !== undefined ? input.min_resources : limits.min_resources;
    const max = input.max_resources !== undefined ? input.max_resources : limits.max_resources;
    const defaults = input.default_configuration ?? (current.defaultConfiguration as ResourceBounds);
    checkResourceBounds(defaults, min, max);
    const now = this.clock.now();
    const data: Prisma.ClusterTemplateUncheckedUpdateInput = { version, updatedAt: now };
    data.versionNotes = input.version_notes ?? null;
    if (input.name !== undefined) data.name = input.name;
    if (input.description !== undefined) data.description = input.description;
    if (input.category !== undefined) data.category = input.category;
    if (input.framework !== undefined) data.framework = input.framework;
    if (input.project_id !== undefined) data.projectId = input.project_id ?? '';
    if (input.docker_image !== undefined) data.dockerImage = input.docker_image;
    if (input.default_configuration !== undefined) {
      data.defaultConfiguration = configOf(input.default_configuration);
    }
    if (input.environment_variables !== undefined) data.environmentVariables = input.environment_variables;
    if (input.startup_script !== undefined) data.startupScript = input.startup_script;
    if (input.port_mappings !== undefined) data.portMappings = portsOf(input.port_mappings);
    if (input.required_packages !== undefined) data.requiredPackages = input.required_packages;
    if (input.software_versions !== undefined) data.softwareVersions = input.software_versions;
    if (input.gpu_compatible !== undefined) data.gpuCompatible = input.gpu_compatible;
    if (input.min_resources !== undefined || input.max_resources !== undefined) {
      data.resourceLimits = limitsOf(min, max) ?? Prisma.DbNull;
    }
    if (input.compatibility !== undefined) {
      data.compatibility = (input.compatibility as Prisma.InputJsonValue | null) ?? Prisma.DbNull;
    }
    if (input.tags !== undefined) data.tags = input.tags;
    if (input.is_public !== undefined) data.isPublic = input.is_public;
    if (input.is_deprecated !== undefined) data.isDeprecated = input.is_deprecated;
    const row = await this.db.prisma
      .$transaction(async (tx) => {
        // Compare-and-set on the version: of two concurrent updates, the second is told to retry.
        const changed = await tx.clusterTemplate.updateMany({
          where: { id: current.id, version: current.version, deletedAt: null },
          data: data as Prisma.ClusterTemplateUncheckedUpdateManyInput,
        });
        if (changed.count === 0) {
          throw new ApiError('CONFLICT', 'the template changed meanwhile; read it again and retry', {
            template_id: current.id,
          });
        }
        const updated = await tx.clusterTemplate.findUniqueOrThrow({ where: { id: current.id } });
        await tx.clusterTemplateVersion.create({ data: versionRow(updated, member.userId, now) });
        return updated;
      })
      .catch((error: unknown) => {
        if (error instanceof ApiError) throw error;
        throw nameConflict(error, input.name ?? current.name, current.projectId);
      });
    return this.viewOf(member.accountId, row);
  }

  async delete(actor: Actor, templateId: string) {
    const member = await this.access.require(actor, { permission: 'write', scope: 'clusters' });
    const current = await this.findOwn(member.accountId, templateId);
    const now = this.clock.now();
    await this.db.prisma.clusterTemplate.updateMany({
      where: { id: current.id, deletedAt: null },
      data: { deletedAt: now },
    });
    const stats = (await this.statsFor(member.accountId, [current.id])).get(current.id) ?? EMPTY_STATS;
    return {
      id: current.id,
      name: current.name,
      deleted: true as const,
      deleted_at: now.toISOString(),
      active_clusters: stats.active,
    };
  }

  // ---- helpers ----

  private async findVisible(accountId: string, templateId: string): Promise<ClusterTemplate> {
    const row = await this.db.prisma.clusterTemplate.findFirst({
      where: { id: templateId, deletedAt: null, OR: [{ accountId }, { accountId: null, official: true }] },
    });
    if (!row) throw templateNotFound(templateId);
    return row;
  }

  /** A template the account may change: its own. Official ones are read-only (403). */
  private async findOwn(accountId: string, templateId: string): Promise<ClusterTemplate> {
    const row = await this.findVisible(accountId, templateId);
    if (row.accountId === null) {
      throw new ApiError('INSUFFICIENT_PERMISSIONS', 'official templates are read-only', {
        template_id: row.id,
        official: true,
        suggestion: 'create your own template from its fields with POST /v1/clusters/templates',
      });
    }
    return row;
  }

  private async viewOf(accountId: string, row: ClusterTemplate) {
    const [stats, context] = await Promise.all([this.statsFor(accountId, [row.id]), this.viewContext([row])]);
    return templateView(row, stats.get(row.id) ?? EMPTY_STATS, context);
  }

  /** Creators' names, account names and the GPU price table, for the rows about to be shown. */
  private async viewContext(rows: ClusterTemplate[]) {
    const userIds = [...new Set(rows.map((r) => r.createdById).filter((id): id is string => id !== null))];
    const accountIds = [...new Set(rows.map((r) => r.accountId).filter((id): id is string => id !== null))];
    const [users, accounts, prices] = await Promise.all([
      userIds.length
        ? this.db.prisma.user.findMany({
            where: { id: { in: userIds } },
            select: { id: true, username: true, name: true },
          })
        : [],
      accountIds.length
        ? this.db.prisma.account.findMany({
            where: { id: { in: accountIds } },
            select: { id: true, name: true },
          })
        : [],
      this.db.prisma.gpuPrice.findMany(),
    ]);
    return {
      users: new Map(users.map((u) => [u.id, u.username ?? u.name ?? null])),
      accounts: new Map(accounts.map((a) => [a.id, a.name])),
      prices: new Map(prices.map((p) => [p.gpuType, p.hourlyRate])),
    };
  }

  /** Deployment counts of the account's clusters per template (see UsageStatistics for the definitions). */
  private async statsFor(accountId: string, templateIds: string[]): Promise<Map<string, TemplateStats>> {
    if (templateIds.length === 0) return new Map();
    const rows = await this.db.sql.query<{
      template_id: string;
      total: number;
      active: number;
      decided: number;
      reached: number;
    }>(
      `SELECT c.template_id,
              count(*)::int AS total,
              count(*) FILTER (WHERE c.status = 'running' AND c.deleted_at IS NULL)::int AS active,
              count(*) FILTER (WHERE c.status NOT IN ('pending', 'starting'))::int AS decided,
              count(*) FILTER (WHERE c.status IN ('running', 'stopping', 'stopped')
                                  OR c.session_started_at IS NOT NULL
                                  OR EXISTS (SELECT 1 FROM usage_records u
                                              WHERE u.resource_id = c.id AND u.kind = 'gpu_compute'))::int AS reached
         FROM clusters c
        WHERE c.account_id = $1 AND c.template_id = ANY($2::text[])
        GROUP BY c.template_id`,
      [accountId, templateIds],
    );
    return new Map(
      rows.map((r) => [
        r.template_id,
        { total: r.total, active: r.active, decided: r.decided, reached: r.reached },
      ]),
    );
  }
}

export type { UsageStatistics };

function configOf(input: DefaultConfigurationInput): Prisma.InputJsonValue {
  const out: Record<string, unknown> = {};
  for (const key of ['gpu_type', 'gpu_count', 'cpu_cores', 'memory_gb', 'storage_gb'] as const) {
    if (input[key] !== undefined) out[key] = input[key];
  }
  return out as Prisma.InputJsonValue;
}

function portsOf(ports: PortMappingInput[]): Prisma.InputJsonValue {
  return ports.map((p) => ({
    internal_port: p.internal_port,
    protocol: p.protocol ?? 'tcp',
    description: p.description ?? '',
    required: p.required ?? false,
  }));
}

function limitsOf(
  min: ResourceBounds | null | undefined,
  max: ResourceBounds | null | undefined,
): Prisma.InputJsonValue | null {
  if (!min && !max) return null;
  return { min_resources: min ?? null, max_resources: max ?? null } as Prisma.InputJsonValue;
}

function asLimits(value: unknown): {
  min_resources: ResourceBounds | null;
  max_resources: ResourceBounds | null;
} {
  const record = (value && typeof value === 'object' ? value : {}) as Record<string, unknown>;
  return {
    min_resources: (record['min_resources'] as ResourceBounds | null | undefined) ?? null,
    max_resources: (record['max_resources'] as ResourceBounds | null | undefined) ?? null,
  };
}

/** The content of a template at one version, as stored in its history. */
function versionRow(row: ClusterTemplate, createdById: string | null, at: Date) {
  return {
    id: `${row.id}@${row.version}`,
    templateId: row.id,
    version: row.version,
    versionNotes: row.versionNotes,
    createdById,
    createdAt: at,
    snapshot: {
      name: row.name,
      description: row.description,
      category: row.category,
      framework: row.framework,
      docker_image: row.dockerImage,
      gpu_compatible: row.gpuCompatible,
      default_configuration: row.defaultConfiguration,
      environment_variables: row.environmentVariables,
      startup_script: row.startupScript,
      port_mappings: row.portMappings,
      required_packages: row.requiredPackages,
      software_versions: row.softwareVersions,
      resource_limits: row.resourceLimits,
      compatibility: row.compatibility,
      tags: row.tags,
      is_public: row.isPublic,
      is_deprecated: row.isDeprecated,
    } as Prisma.InputJsonValue,
  };
}

function nameConflict(error: unknown, name: string, projectId: string): unknown {
  const code = (error as { code?: string }).code;
  const message = String((error as Error).message ?? '');
  if (code === 'P2002' || message.includes('cluster_templates_live_name_key') || message.includes('23505')) {
    return new ApiError('TEMPLATE_NAME_EXISTS', `a template named "${name}" already exists in this project`, {
      name,
      project_id: projectId || null,
    });
  }
  return error;
}

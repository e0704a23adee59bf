import { ApiError, newId } from '@anvil/shared';
import type { AccessControl, Actor, MemberAccess } from '../accounts/access.ts';
import type { AuditLog } from '../accounts/audit.ts';
import type { Clock } from '../auth/clock.ts';
import type { ClusterAccess } from '../clusters/access.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { type ClusterSecret, Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import {
  checkEnvName,
  checkFilePath,
  DEFAULT_FILE_MODE,
  formatFileMode,
  nextRotationOf,
  parseFileMode,
  type RotationPolicyInput,
  type StoredPermissions,
  type StoredRotationPolicy,
  validateRotationPolicy,
} from './rules.ts';

/**
 * Cluster secrets (spec: Secret). Values are sealed with the secret box before they reach the database,
 * bound to the secret's id and cluster, and opened only to reveal them to a permitted caller or to
 * inject them into the cluster's container (secrets/injection.ts).
 *
 * Who may do what:
 * - list and get metadata: `read` on the cluster (ClusterAccess; another account's cluster is 404);
 * - create, update, delete: `write` on the cluster;
 * - a value (include_value / include_values): additionally the elevated permission `manage_security`
 *   (scope `security`: the permission that already guards exporting settings secrets), and, when the
 *   secret's `permissions.allowed_users` / `allowed_roles` are not both empty, the caller's user id or
 *   role must be listed there.
 */

export interface SecretPermissionsInput {
  read_only?: boolean | undefined;
  allowed_users?: string[] | undefined;
  allowed_roles?: string[] | undefined;
  file_mode?: number | string | undefined;
}

export interface CreateSecretInput {
  name: string;
  description?: string | null | undefined;
  type: string;
  category?: string | null | undefined;
  value: string;
  environment_variable?: string | null | undefined;
  file_path?: string | null | undefined;
  permissions?: SecretPermissionsInput | undefined;
  expiration_date?: string | null | undefined;
  rotation_policy?: RotationPolicyInput | null | undefined;
  tags?: string[] | undefined;
}

export type UpdateSecretInput = Partial<Omit<CreateSecretInput, 'name'>>;

export interface ListSecretsQuery {
  type?: string | undefined;
  category?: string | undefined;
  search?: string | undefined;
  include_values?: boolean | undefined;
}

export interface SecretView {
  id: string;
  cluster_id: string;
  name: string;
  description: string | null;
  type: string;
  category: string | null;
  value?: string;
  environment_variable: string | null;
  file_path: string | null;
  encrypted: true;
  expiration_date: string | null;
  rotation_policy: {
    enabled: boolean;
    rotation_interval_days: number | null;
    notification_days_before: number | null;
    next_rotation: string | null;
    last_rotation: string | null;
  };
  permissions: { read_only: boolean; allowed_users: string[]; allowed_roles: string[]; file_mode: string };
  usage_statistics: { last_accessed: string | null; access_count: number };
  tags: string[];
  created_at: string;
  updated_at: string;
}

/** Associated data binding a sealed value to its secret: a value copied to another row fails to open. */
export function sealContext(secret: Pick<ClusterSecret, 'id' | 'clusterId'>): string {
  return `${secret.clusterId}:cluster_secret:${secret.id}`;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);

export function viewSecret(row: ClusterSecret, value?: string): SecretView {
  const permissions = row.permissions as unknown as StoredPermissions;
  const rotation = (row.rotationPolicy ?? null) as StoredRotationPolicy | null;
  return {
    id: row.id,
    cluster_id: row.clusterId,
    name: row.name,
    description: row.description,
    type: row.type,
    category: row.category,
    ...(value === undefined ? {} : { value }),
    environment_variable: row.environmentVariable,
    file_path: row.filePath,
    encrypted: true,
    expiration_date: iso(row.expirationDate),
    rotation_policy: {
      enabled: rotation?.enabled ?? false,
      rotation_interval_days: rotation?.rotation_interval_days ?? null,
      notification_days_before: rotation?.notification_days_before ?? null,
      next_rotation: iso(row.nextRotation),
      last_rotation: iso(row.lastRotation),
    },
    permissions: {
      read_only: permissions.read_only,
      allowed_users: permissions.allowed_users,
      allowed_roles: permissions.allowed_roles,
      file_mode: formatFileMode(permissions.file_mode),
    },
    usage_statistics: { last_accessed: iso(row.lastAccessed), access_count: row.accessCount },
    tags: row.tags,
    created_at: row.createdAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
  };
}

function validation(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `body field "${field}" ${reason}`, {
    field,
    reason,
    location: 'body',
  });
}

function secretNotFound(clusterId: string, name: string): ApiError {
  return new ApiError('SECRET_NOT_FOUND', `no secret ${name} in cluster ${clusterId}`, {
    cluster_id: clusterId,
    secret_name: name,
  });
}

function isUniqueViolation(error: unknown): boolean {
  return (error as { code?: string }).code === 'P2002';
}

export interface SecretServiceDeps {
  db: Database;
  clock: Clock;
  access: AccessControl;
  /** Where refusals by a secret's own reader list are recorded (access_denied), as AccessControl does. */
  audit?: AuditLog | undefined;
  clusters: ClusterAccess;
  /** The process's secret box (loaded lazily by the accounts area). */
  box: () => SecretBox;
}

export class SecretService {
  constructor(private readonly deps: SecretServiceDeps) {}

  private get prisma() {
    return this.deps.db.prisma;
  }

  /** The elevated permission needed to see any value; 403 INSUFFICIENT_PERMISSIONS (audited) otherwise. */
  private async requireReveal(actor: Actor): Promise<MemberAccess> {
    return this.deps.access.require(actor, {
      permission: 'manage_security',
      scope: 'security',
      action: 'reveal_secret_attempt',
    });
  }

  /** The secret's own reader list: empty lists mean no restriction beyond the elevated permission. */
  private listedReader(member: MemberAccess, row: ClusterSecret): boolean {
    const p = row.permissions as unknown as StoredPermissions;
    if (p.allowed_users.length === 0 && p.allowed_roles.length === 0) return true;
    return p.allowed_users.includes(member.userId) || p.allowed_roles.includes(member.role);
  }

  private open(row: ClusterSecret): string {
    return this.deps.box().open(row.sealedValue, sealContext(row));
  }

  /** Counts accesses (reveals, injections): one statement for any number of secrets. */
  async recordAccess(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.prisma.clusterSecret.updateMany({
      where: { id: { in: ids } },
      data: { accessCount: { increment: 1 }, lastAccessed: this.deps.clock.now() },
    });
  }

  private async find(clusterId: string, name: string): Promise<ClusterSecret> {
    const row = await this.prisma.clusterSecret.findUnique({
      where: { clusterId_name: { clusterId, name } },
    });
    if (!row) throw secretNotFound(clusterId, name);
    return row;
  }

  async list(
    actor: Actor,
    clusterId: string,
    query: ListSecretsQuery,
  ): Promise<{ secrets: SecretView[]; total_count: number; secret_types: Record<string, number> }> {
    await this.deps.clusters.require(actor, clusterId, 'read');
    const member = query.include_values ? await this.requireReveal(actor) : null;
    const where: Prisma.ClusterSecretWhereInput = { clusterId };
    if (query.type) where.type = query.type;
    if (query.category) where.category = query.category;
    if (query.search) {
      const term = query.search;
      where.OR = [
        { name: { contains: term, mode: 'insensitive' } },
        { description: { contains: term, mode: 'insensitive' } },
        { tags: { has: term } },
      ];
    }
    const rows = await this.prisma.clusterSecret.findMany({ where, orderBy: { name: 'asc' } });
    const revealed = member ? rows.filter((row) => this.listedReader(member, row)) : [];
    const values = new Map(revealed.map((row) => [row.id, this.open(row)]));
    await this.recordAccess([...values.keys()]);
    const after = values.size > 0 ? await this.reload(rows) : rows;
    const secretTypes: Record<string, number> = {};
    for (const row of after) secretTypes[row.type] = (secretTypes[row.type] ?? 0) + 1;
    return {
      secrets: after.map((row) => viewSecret(row, values.get(row.id))),
      total_count: after.length,
      secret_types: secretTypes,
    };
  }

  /** The rows again, so counters just incremented show in the answer. */
  private async reload(rows: ClusterSecret[]): Promise<ClusterSecret[]> {
    const fresh = await this.prisma.clusterSecret.findMany({ where: { id: { in: rows.map((r) => r.id) } } });
    const byId = new Map(fresh.map((r) => [r.id, r]));
    return rows.map((r) => byId.get(r.id) ?? r);
  }

  async get(actor: Actor, clusterId: string, name: string, includeValue: boolean): Promise<SecretView> {
    await this.deps.clusters.require(actor, clusterId, 'read');
    const row = await this.find(clusterId, name);
    if (!includeValue) return viewSecret(row);
    const member = await this.requireReveal(actor);
    if (!this.listedReader(member, row)) {
      await this.deps.audit?.record({
        accountId: member.accountId,
        type: 'access_denied',
        action: 'reveal_secret_attempt',
        actor: { userId: member.userId, ip: actor.ip },
        resource: { type: 'cluster', id: clusterId, name: null },
        details: { secret_name: name, reason: 'not in allowed_users or allowed_roles' },
      });
      throw new ApiError(
        'INSUFFICIENT_PERMISSIONS',
        `secret ${name} may be read only by the users and roles in its permissions`,
        { secret_name: name, role: member.role, reason: 'not in allowed_users or allowed_roles' },
      );
    }
    const value = this.open(row);
    await this.recordAccess([row.id]);
    return viewSecret(await this.find(clusterId, name), value);
  }

  async create(actor: Actor, clusterId: string, input: CreateSecretInput): Promise<SecretView> {
    await this.deps.clusters.require(actor, clusterId, 'write');
    const now = this.deps.clock.now();
    const permissions = this.permissionsOf(undefined, input.permissions);
    const rotation = input.rotation_policy ? validateRotationPolicy(input.rotation_policy) : null;
    const filePath = input.file_path == null ? null : checkFilePath(input.file_path);
    const environmentVariable =
      input.environment_variable == null ? null : checkEnvName(input.environment_variable);
    await this.refuseClashes(clusterId, null, environmentVariable, filePath);
    const id = newId('secret');
    const data = {
      id,
      accountId: actor.principal.accountId,
      clusterId,
      name: input.name,
      description: input.description ?? null,
      type: input.type,
      category: input.category ?? null,
      sealedValue: this.deps.box().seal(input.value, sealContext({ id, clusterId })),
      environmentVariable,
      filePath,
      expirationDate: input.expiration_date ? new Date(input.expiration_date) : null,
      permissions: permissions as unknown as Prisma.InputJsonValue,
      rotationPolicy: rotation === null ? Prisma.DbNull : (rotation as unknown as Prisma.InputJsonValue),
      lastRotation: null,
      nextRotation: nextRotationOf(rotation, null, now),
      tags: input.tags ?? [],
      createdById: actor.principal.userId,
      createdAt: now,
      updatedAt: now,
    };
    try {
      return viewSecret(await this.prisma.clusterSecret.create({ data }));
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new ApiError(
          'SECRET_ALREADY_EXISTS',
          `cluster ${clusterId} already has a secret ${input.name}`,
          {
            cluster_id: clusterId,
            secret_name: input.name,
          },
        );
      }
      throw error;
    }
  }

  /**
   * Changes the given fields. A new value is sealed again and counts as a rotation: last_rotation
   * becomes now and next_rotation is recomputed from it. It reaches the container at its next start.
   */
  async update(actor: Actor, clusterId: string, name: string, input: UpdateSecretInput): Promise<SecretView> {
    await this.deps.clusters.require(actor, clusterId, 'write');
    const row = await this.find(clusterId, name);
    const now = this.deps.clock.now();
    const data: Prisma.ClusterSecretUpdateInput = { updatedAt: now };
    if (input.description !== undefined) data.description = input.description;
    if (input.type !== undefined) data.type = input.type;
    if (input.category !== undefined) data.category = input.category;
    if (input.tags !== undefined) data.tags = input.tags;
    if (input.expiration_date !== undefined) {
      data.expirationDate = input.expiration_date === null ? null : new Date(input.expiration_date);
    }
    if (input.permissions !== undefined) {
      data.permissions = this.permissionsOf(
        row.permissions as unknown as StoredPermissions,
        input.permissions,
      ) as unknown as Prisma.InputJsonValue;
    }
    const environmentVariable =
      input.environment_variable === undefined
        ? row.environmentVariable
        : input.environment_variable === null
          ? null
          : checkEnvName(input.environment_variable);
    const filePath =
      input.file_path === undefined
        ? row.filePath
        : input.file_path === null
          ? null
          : checkFilePath(input.file_path);
    if (input.environment_variable !== undefined) data.environmentVariable = environmentVariable;
    if (input.file_path !== undefined) data.filePath = filePath;
    await this.refuseClashes(clusterId, row.id, environmentVariable, filePath);

    let rotation = (row.rotationPolicy ?? null) as StoredRotationPolicy | null;
    if (input.rotation_policy !== undefined) {
      rotation =
        input.rotation_policy === null ? null : validateRotationPolicy(input.rotation_policy, rotation);
      data.rotationPolicy =
        rotation === null ? Prisma.DbNull : (rotation as unknown as Prisma.InputJsonValue);
    }
    let lastRotation = row.lastRotation;
    if (input.value !== undefined) {
      data.sealedValue = this.deps.box().seal(input.value, sealContext(row));
      lastRotation = now;
      data.lastRotation = now;
    }
    data.nextRotation = nextRotationOf(rotation, lastRotation, row.createdAt);
    const updated = await this.prisma.clusterSecret.update({ where: { id: row.id }, data });
    return viewSecret(updated);
  }

  async delete(
    actor: Actor,
    clusterId: string,
    name: string,
  ): Promise<{ id: string; name: string; deleted: true; deleted_at: string }> {
    await this.deps.clusters.require(actor, clusterId, 'write');
    const row = await this.find(clusterId, name);
    const removed = await this.prisma.clusterSecret.deleteMany({ where: { id: row.id } });
    if (removed.count === 0) throw secretNotFound(clusterId, name);
    return { id: row.id, name: row.name, deleted: true, deleted_at: this.deps.clock.now().toISOString() };
  }

  /** The secrets injected into a cluster's container: those with a target that have not expired. */
  async injectable(accountId: string, clusterId: string): Promise<ClusterSecret[]> {
    const now = this.deps.clock.now();
    return this.prisma.clusterSecret.findMany({
      where: {
        accountId,
        clusterId,
        OR: [{ environmentVariable: { not: null } }, { filePath: { not: null } }],
        AND: [{ OR: [{ expirationDate: null }, { expirationDate: { gt: now } }] }],
      },
      orderBy: { name: 'asc' },
    });
  }

  /** The account of a cluster workload (contract 1: its id is the cluster id); null for other kinds. */
  async clusterOwner(workloadId: string): Promise<{ accountId: string } | null> {
    const row = await this.prisma.workload.findUnique({
      where: { id: workloadId },
      select: { kind: true, ownerAccountId: true },
    });
    return row?.kind === 'cluster' ? { accountId: row.ownerAccountId } : null;
  }

  /** Opens one value for injection (no permission check: the container is the cluster's own). */
  openForInjection(row: ClusterSecret): string {
    return this.open(row);
  }

  /**
   * Key rotation: values sealed under a key now in ANVIL_SECRET_KEY_PREVIOUS are sealed again under
   * the current ANVIL_SECRET_KEY. Run at start-up; returns how many rows changed.
   */
  async reseal(): Promise<number> {
    const box = this.deps.box();
    const stale = await this.prisma.clusterSecret.findMany({
      where: { NOT: { sealedValue: { startsWith: `v1.${box.keyId}.` } } },
    });
    let changed = 0;
    for (const row of stale) {
      if (!box.needsReseal(row.sealedValue)) continue;
      const sealed = box.seal(box.open(row.sealedValue, sealContext(row)), sealContext(row));
      // Only if nobody changed the value meanwhile (another process re-sealing, or an update).
      const result = await this.prisma.clusterSecret.updateMany({
        where: { id: row.id, sealedValue: row.sealedValue },
        data: { sealedValue: sealed },
      });
      changed += result.count;
    }
    return changed;
  }

  private permissionsOf(
    current: StoredPermissions | undefined,
    input: SecretPermissionsInput | undefined,
  ): StoredPermissions {
    const base: StoredPermissions = current ?? {
      read_only: true,
      allowed_users: [],
      allowed_roles: [],
      file_mode: DEFAULT_FILE_MODE,
    };
    if (!input) return base;
    let fileMode = base.file_mode;
    if (input.file_mode !== undefined) {
      const parsed = parseFileMode(input.file_mode);
      if (parsed === null) {
        throw validation('permissions.file_mode', 'must be an octal mode such as "0400" or an integer 0-511');
      }
      fileMode = parsed;
    }
    return {
      read_only: input.read_only ?? base.read_only,
      allowed_users: input.allowed_users ?? base.allowed_users,
      allowed_roles: input.allowed_roles ?? base.allowed_roles,
      file_mode: fileMode,
    };
  }

  /** Two secrets of one cluster cannot fill the same variable or file. */
  private async refuseClashes(
    clusterId: string,
    selfId: string | null,
    environmentVariable: string | null,
    filePath: string | null,
  ): Promise<void> {
    if (environmentVariable === null && filePath === null) return;
    const others = await this.prisma.clusterSecret.findMany({
      where: {
        clusterId,
        ...(selfId ? { id: { not: selfId } } : {}),
        OR: [...(environmentVariable ? [{ environmentVariable }] : []), ...(filePath ? [{ filePath }] : [])],
      },
      select: { name: true, environmentVariable: true, filePath: true },
    });
    const clash = others[0];
    if (!clash) return;
    const field =
      environmentVariable && clash.environmentVariable === environmentVariable
        ? 'environment_variable'
        : 'file_path';
    throw new ApiError('CONFLICT', `secret ${clash.name} of this cluster already uses this ${field}`, {
      field,
      secret_name: clash.name,
    });
  }
}

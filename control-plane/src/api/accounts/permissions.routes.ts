import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { AUDIT_PERIODS, AUDIT_TYPES } from '../../accounts/audit.ts';
import { viewRole } from '../../accounts/custom-roles.ts';
import {
  LIMITATION_NAMES,
  ROLE_PERMISSIONS,
  ROLE_SCOPES,
  scopeOfResourceType,
} from '../../accounts/roles.ts';
import { checkPermissions, checkScopes, validationError } from '../../accounts/validation.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { AnyObject, actorOf, DateTime, Nullable, NullableDateTime, UserIdParams } from './common.ts';

const tags = ['permissions'];

const Limits = Type.Object(
  Object.fromEntries(
    LIMITATION_NAMES.map((name) => [
      name,
      Type.Optional(Nullable(Type.Integer({ minimum: 0, maximum: 1_000_000 }))),
    ]),
  ),
  { additionalProperties: false },
);

const RoleRecord = Type.Object(
  {
    id: Type.String({ description: 'Built-in name or role_custom_<name>' }),
    name: Type.String(),
    displayName: Type.String(),
    description: Nullable(Type.String()),
    permissions: Type.Array(Type.String()),
    scopes: Type.Array(Type.String()),
    limitations: AnyObject,
    inherits: Type.Array(Type.String()),
    assignable: Type.Boolean(),
    builtIn: Type.Boolean(),
    createdAt: NullableDateTime,
    updatedAt: NullableDateTime,
  },
  { $id: 'Role' },
);

const GrantRecord = Type.Object(
  {
    id: Type.String({ description: 'grant_<id>' }),
    userId: Type.String(),
    permissions: Type.Array(Type.String()),
    scopes: Type.Array(Type.String()),
    resources: Type.Array(Type.String()),
    expiresAt: NullableDateTime,
    reason: Nullable(Type.String()),
    grantedBy: Type.String(),
    grantedAt: DateTime,
    status: Type.String({ description: 'active, revoked; expired when an active grant is past expiresAt' }),
    revokedBy: Nullable(Type.String()),
    revokedAt: NullableDateTime,
  },
  { $id: 'Grant' },
);

const ShareRecord = Type.Object(
  {
    id: Type.String({ description: 'share_<id>' }),
    resourceId: Type.String(),
    userId: Type.String(),
    permissions: Type.Array(Type.String()),
    sharedAt: DateTime,
    sharedBy: Type.String(),
    expiresAt: NullableDateTime,
    status: Type.String({ description: 'active, revoked; expired past expiresAt' }),
    revokedAt: NullableDateTime,
  },
  { $id: 'Share' },
);

const permissionList = (description: string) =>
  Type.Array(Type.String({ maxLength: 32 }), { minItems: 1, maxItems: 16, description });

const RoleName = Type.String({
  minLength: 2,
  maxLength: 48,
  description: 'Lower-case identifier: [a-z][a-z0-9_-]*',
});

export const permissionRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const accounts = context.accounts;
  app.addSchema(RoleRecord);
  app.addSchema(GrantRecord);
  app.addSchema(ShareRecord);
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/accounts/permissions/schema',
    {
      config,
      schema: {
        tags,
        summary: 'Roles (built-in and custom), permission names and scopes',
        response: {
          200: Type.Object({
            roles: Type.Record(Type.String(), Type.Ref('Role')),
            permissions: Type.Record(Type.String(), Type.String()),
            scopes: Type.Record(Type.String(), Type.String()),
          }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request) => accounts.roles.schema(actorOf(request)),
  );

  app.get(
    '/v2/accounts/permissions/roles',
    {
      config,
      schema: {
        tags,
        summary: 'List roles (designed: the spec does not show listing)',
        response: { 200: Type.Object({ roles: Type.Array(Type.Ref('Role')) }), ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => ({ roles: await accounts.roles.list(actorOf(request)) }),
  );

  const RoleIdParams = Type.Object({ role_id: Type.String({ minLength: 1, maxLength: 80 }) });

  app.get(
    '/v2/accounts/permissions/roles/:role_id',
    {
      config,
      schema: {
        tags,
        summary: 'Read one role (designed)',
        params: RoleIdParams,
        response: { 200: Type.Object({ role: Type.Ref('Role') }), ...flatErrors(401, 403, 404, 429) },
      },
    },
    async (request) => ({
      role: viewRole(await accounts.roles.get(actorOf(request), request.params.role_id)),
    }),
  );

  app.post(
    '/v2/accounts/permissions/roles',
    {
      config: { ...config, sensitive: 'role change' },
      schema: {
        tags,
        summary: 'Create a custom role',
        description:
          'Needs manage_team. The id is role_custom_<name>; names are unique in the account and may not be a ' +
          'built-in role name (409 ROLE_NAME_EXISTS). A role may inherit admin, developer, viewer or custom ' +
          'roles whose permissions the caller holds — never owner, never itself through any chain ' +
          '(422 INVALID_ROLE_HIERARCHY) — and carries no permission the caller lacks (403 ' +
          'INSUFFICIENT_PERMISSIONS). Limitations maxApiKeys, maxClusters, maxEndpoints are enforced where ' +
          'those things are created (403 LIMIT_EXCEEDED); maxComputeHours (GPU-hours per calendar month, UTC, from ' +
          'metered usage) stops new placement once reached — creating or starting clusters, creating endpoints, ' +
          'creating or resuming training jobs answer 403 LIMIT_EXCEEDED — while running work goes on.',
        body: Type.Object(
          {
            name: RoleName,
            displayName: Type.String({ minLength: 1, maxLength: 100 }),
            description: Type.Optional(Nullable(Type.String({ maxLength: 500 }))),
            permissions: permissionList(`Values: ${ROLE_PERMISSIONS.join(', ')}`),
            scopes: Type.Array(Type.String({ maxLength: 32 }), {
              minItems: 1,
              maxItems: 16,
              description: `Values: ${ROLE_SCOPES.join(', ')}`,
            }),
            limitations: Type.Optional(Limits),
            inherits: Type.Optional(Type.Array(Type.String({ maxLength: 80 }), { maxItems: 8 })),
            assignable: Type.Optional(Type.Boolean({ default: true })),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({ role: Type.Ref('Role') }),
          ...flatErrors(400, 401, 403, 409, 422, 429),
        },
      },
    },
    async (request, reply) => {
      const role = await accounts.roles.create(actorOf(request), {
        ...request.body,
        limitations: nonNull(request.body.limitations),
      });
      return reply.code(201).send({ role });
    },
  );

  app.put(
    '/v2/accounts/permissions/roles/:role_id',
    {
      config: { ...config, sensitive: 'role change' },
      schema: {
        tags,
        summary: 'Change a custom role (members holding it are affected at once)',
        params: RoleIdParams,
        body: Type.Object(
          {
            displayName: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
            description: Type.Optional(Nullable(Type.String({ maxLength: 500 }))),
            permissions: Type.Optional(permissionList(`Values: ${ROLE_PERMISSIONS.join(', ')}`)),
            scopes: Type.Optional(Type.Array(Type.String({ maxLength: 32 }), { minItems: 1, maxItems: 16 })),
            limitations: Type.Optional(Limits),
            inherits: Type.Optional(Type.Array(Type.String({ maxLength: 80 }), { maxItems: 8 })),
            assignable: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ role: Type.Ref('Role') }),
          ...flatErrors(400, 401, 403, 404, 409, 422, 429),
        },
      },
    },
    async (request) => ({
      role: await accounts.roles.update(actorOf(request), request.params.role_id, {
        ...request.body,
        limitations: request.body.limitations === undefined ? undefined : nonNull(request.body.limitations),
      }),
    }),
  );

  app.delete(
    '/v2/accounts/permissions/roles/:role_id',
    {
      config: { ...config, sensitive: 'role change' },
      schema: {
        tags,
        summary:
          'Delete a custom role no member, invitation or role still uses (designed; else 409 ROLE_IN_USE)',
        params: RoleIdParams,
        response: {
          200: Type.Object({ id: Type.String(), deleted: Type.Boolean() }),
          ...flatErrors(401, 403, 404, 409, 429),
        },
      },
    },
    async (request) => accounts.roles.remove(actorOf(request), request.params.role_id),
  );

  app.get(
    '/v2/accounts/permissions/audit',
    {
      config,
      schema: {
        tags,
        summary: 'Audit log of permission changes, role assignments and access denials',
        description:
          'Needs manage_team (or manage_security). `userId` matches events where the member acted or was ' +
          'the target. The summary counts the period under the same userId/resourceId filters, whatever ' +
          '`type` is. Events are kept security.audit.retention_days (default 90).',
        querystring: Type.Object(
          {
            period: Type.Optional(
              Type.String({ maxLength: 16, description: `One of ${AUDIT_PERIODS.join(', ')}; default 7d` }),
            ),
            type: Type.Optional(Type.String({ maxLength: 32, description: AUDIT_TYPES.join(', ') })),
            userId: Type.Optional(Type.String({ maxLength: 64 })),
            resourceId: Type.Optional(Type.String({ maxLength: 128 })),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
            offset: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000, default: 0 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            period: Type.String(),
            periodStart: DateTime,
            periodEnd: DateTime,
            total: Type.Integer(),
            events: Type.Array(AnyObject),
            summary: Type.Object({
              permissionChanges: Type.Integer(),
              accessDenied: Type.Integer(),
              roleAssignments: Type.Integer(),
              resourceShares: Type.Integer(),
            }),
          }),
          ...flatErrors(400, 401, 403, 429),
        },
      },
    },
    async (request) => {
      const actor = actorOf(request);
      await accounts.access.requireAny(actor, [
        { permission: 'manage_team', scope: 'accounts', action: 'audit_read_attempt' },
        { permission: 'manage_security', scope: 'security' },
      ]);
      return accounts.audit.list(actor.principal.accountId, request.query);
    },
  );

  app.post(
    '/v2/accounts/permissions/check',
    {
      config,
      schema: {
        tags,
        summary: 'Would this member be allowed? (role, custom permissions, grants, resource shares)',
        description:
          'Checks the caller by default; checking another member needs manage_team. With a resourceId the ' +
          "scope defaults to the resource's (clusters, endpoints) and ownership matters: roles give all " +
          "their permissions on own resources, read and execute on teammates' (all, for team managers). " +
          '`source` is role, custom_permission, grant or share. details.limitations: the role limits ' +
          "(maxEndpoints, maxClusters, maxComputeHours, maxApiKeys; null = none), the member's GPU-hours this " +
          'calendar month (UTC) as metered (usedComputeHours; remainingComputeHours null without a limit; ' +
          "computePeriodEnd), and the account's serverless execution limit (maxExecutionsPerHour, " +
          'remainingExecutions in the current hour).',
        body: Type.Object(
          {
            userId: Type.Optional(Type.String({ maxLength: 64 })),
            permission: Type.String({ maxLength: 32 }),
            scope: Type.Optional(Type.String({ maxLength: 32 })),
            resourceId: Type.Optional(Type.String({ maxLength: 128 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            userId: Type.String(),
            permission: Type.String(),
            scope: Type.String(),
            resourceId: Nullable(Type.String()),
            allowed: Type.Boolean(),
            source: Nullable(Type.String()),
            role: Type.String(),
            details: AnyObject,
          }),
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const actor = actorOf(request);
      const { permission, resourceId } = request.body;
      checkPermissions([permission]);
      const userId = request.body.userId ?? actor.principal.userId;
      if (userId !== actor.principal.userId) {
        await accounts.access.require(actor, {
          permission: 'manage_team',
          scope: 'accounts',
          action: 'check_attempt',
        });
      }
      const member = await accounts.access.load(actor.principal.accountId, userId);
      if (!member) throw new ApiError('MEMBER_NOT_FOUND', `no member ${userId} in this team`, { userId });
      const resource = resourceId ? await accounts.access.findResource(member.accountId, resourceId) : null;
      if (resourceId && !resource) {
        throw new ApiError('RESOURCE_NOT_FOUND', `no resource ${resourceId} in this account`, { resourceId });
      }
      const scope = request.body.scope ?? (resource ? scopeOfResourceType(resource.type) : undefined);
      if (!scope) throw validationError('scope', 'is required without a resourceId');
      checkScopes([scope]);
      const decision = await accounts.access.decide(member, permission, scope, resource);
      const limits = accounts.access.limitations(member);
      const [compute, rates] = await Promise.all([
        accounts.computeHours.use(member),
        context.rateLimits.status(actor.principal),
      ]);
      // The account's serverless execution limit (POST /endpoints/*/execute per hour, boosts included).
      const execution = rates.endpoint_limits.find((l) => l.operation === 'POST /endpoints/*/execute');
      return {
        userId,
        permission,
        scope,
        resourceId: resourceId ?? null,
        allowed: decision.allowed,
        source: decision.source,
        role: member.role,
        details: {
          reason: decision.reason,
          ...(decision.grantId ? { grantId: decision.grantId } : {}),
          ...(decision.shareId ? { shareId: decision.shareId } : {}),
          ...(decision.resource ? { resource: decision.resource } : {}),
          limitations: {
            ...Object.fromEntries(LIMITATION_NAMES.map((n) => [n, limits[n] ?? null])),
            usedComputeHours: compute.used,
            remainingComputeHours: compute.remaining,
            computePeriodEnd: compute.periodEnd.toISOString(),
            maxExecutionsPerHour: execution?.limit ?? null,
            remainingExecutions: execution?.remaining ?? null,
          },
        },
      };
    },
  );

  app.delete(
    '/v2/accounts/permissions/grants/:grant_id',
    {
      config,
      schema: {
        tags,
        summary: 'Revoke a grant (takes effect at once)',
        params: Type.Object({ grant_id: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: { 200: Type.Object({ grant: Type.Ref('Grant') }), ...flatErrors(401, 403, 404, 429) },
      },
    },
    async (request) => ({ grant: await accounts.grants.revoke(actorOf(request), request.params.grant_id) }),
  );

  app.get(
    '/v2/accounts/permissions/grants',
    {
      config,
      schema: {
        tags,
        summary: "List grants (designed): one's own, or everyone's for team managers",
        querystring: Type.Object(
          {
            userId: Type.Optional(Type.String({ maxLength: 64 })),
            status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('revoked')])),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ grants: Type.Array(Type.Ref('Grant')) }),
          ...flatErrors(400, 401, 403, 429),
        },
      },
    },
    async (request) => ({ grants: await accounts.grants.list(actorOf(request), request.query) }),
  );

  const ResourceParams = Type.Object({ resource_id: Type.String({ minLength: 1, maxLength: 128 }) });

  app.post(
    '/v2/accounts/permissions/resources/:resource_id/share',
    {
      config,
      schema: {
        tags,
        summary: 'Share a resource with members (or departments) of the team',
        description:
          'The resource owner or a team manager shares read, write or execute — never more than they hold on ' +
          'the resource. `teams` names departments: their current members are shared with. Sharing again ' +
          'with the same member replaces the permissions and expiry of the active share.',
        params: ResourceParams,
        body: Type.Object(
          {
            users: Type.Array(Type.String({ maxLength: 64 }), { maxItems: 100 }),
            teams: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 20 })),
            permissions: permissionList('Values: read, write, execute'),
            expiresAt: Type.Optional(Type.String({ format: 'date-time' })),
            message: Type.Optional(Type.String({ maxLength: 500 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            resourceId: Type.String(),
            shares: Type.Array(Type.Ref('Share')),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => accounts.shares.share(actorOf(request), request.params.resource_id, request.body),
  );

  app.get(
    '/v2/accounts/permissions/resources/:resource_id/shares',
    {
      config,
      schema: {
        tags,
        summary: 'Active shares of a resource (designed)',
        params: ResourceParams,
        response: {
          200: Type.Object({ resourceId: Type.String(), shares: Type.Array(Type.Ref('Share')) }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => accounts.shares.list(actorOf(request), request.params.resource_id),
  );

  app.delete(
    '/v2/accounts/permissions/shares/:share_id',
    {
      config,
      schema: {
        tags,
        summary: 'Revoke a share (designed): the owner, the sharer or a team manager',
        params: Type.Object({ share_id: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: { 200: Type.Object({ share: Type.Ref('Share') }), ...flatErrors(401, 403, 404, 429) },
      },
    },
    async (request) => ({ share: await accounts.shares.revoke(actorOf(request), request.params.share_id) }),
  );

  app.get(
    '/v2/accounts/permissions/:user_id',
    {
      config,
      schema: {
        tags,
        summary: 'Effective permissions of a member (`me` for the caller)',
        description:
          'Role permissions with inheritance, custom permissions, active grants; resourceAccess per scope. ' +
          "Another member's needs manage_team.",
        params: UserIdParams,
        response: {
          200: Type.Object({
            userId: Type.String(),
            role: Type.String(),
            status: Type.String(),
            effectivePermissions: AnyObject,
            customPermissions: Type.Array(Type.String()),
            grants: Type.Array(AnyObject),
            inheritedFrom: Type.Array(Type.String()),
            lastUpdated: DateTime,
          }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const actor = actorOf(request);
      const userId = request.params.user_id === 'me' ? actor.principal.userId : request.params.user_id;
      if (userId !== actor.principal.userId) {
        await accounts.access.require(actor, {
          permission: 'manage_team',
          scope: 'accounts',
          action: 'read_permissions_attempt',
        });
      }
      const member = await accounts.access.load(actor.principal.accountId, userId);
      if (!member) throw new ApiError('MEMBER_NOT_FOUND', `no member ${userId} in this team`, { userId });
      return accounts.access.effectiveView(member);
    },
  );

  app.post(
    '/v2/accounts/permissions/:user_id/grant',
    {
      config: { ...config, sensitive: 'permission grant' },
      schema: {
        tags,
        summary: 'Grant permissions to a member (never above your own)',
        description:
          'Needs manage_team. Each permission must be one the caller holds in each scope (on each resource, ' +
          'when resources are named), else 403 INSUFFICIENT_PERMISSIONS naming what is missing. A grant ' +
          'with resources applies to those resources only. It stops at expiresAt or when revoked.',
        params: UserIdParams,
        body: Type.Object(
          {
            permissions: permissionList(`Values: ${ROLE_PERMISSIONS.join(', ')}`),
            scopes: Type.Array(Type.String({ maxLength: 32 }), {
              minItems: 1,
              maxItems: 16,
              description: `Values: ${ROLE_SCOPES.join(', ')}`,
            }),
            resources: Type.Optional(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 100 })),
            expiresAt: Type.Optional(Type.String({ format: 'date-time' })),
            reason: Type.Optional(Type.String({ maxLength: 500 })),
          },
          { additionalProperties: false },
        ),
        response: { 201: Type.Object({ grant: Type.Ref('Grant') }), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request, reply) => {
      const grant = await accounts.grants.grant(actorOf(request), request.params.user_id, request.body);
      return reply.code(201).send({ grant });
    },
  );
};

function nonNull(limits: Record<string, number | null | undefined> | undefined) {
  if (!limits) return undefined;
  return Object.fromEntries(Object.entries(limits).filter(([, v]) => typeof v === 'number')) as Record<
    string,
    number
  >;
}

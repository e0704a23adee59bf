import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { ACTIVITY_PERIODS } from '../../accounts/activity.ts';
import { INVITATION_LIFETIMES } from '../../accounts/invitations.ts';
import { BULK_OPERATIONS } from '../../accounts/team.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { ApiKeyRecord } from '../auth/auth.schemas.ts';
import {
  AnyObject,
  actorOf,
  DateTime,
  InvitationRecord,
  MemberRecord,
  Nullable,
  UserIdParams,
} from './common.ts';

const tags = ['team'];

const Lifetime = Type.Unsafe<string>({
  type: 'string',
  enum: Object.keys(INVITATION_LIFETIMES),
  description: 'Invitation lifetime; default 7d',
});

const inviteFields = {
  email: Type.String({ minLength: 3, maxLength: 254 }),
  role: Type.String({
    minLength: 1,
    maxLength: 80,
    description:
      'admin, developer, viewer, or an assignable custom role id (role_custom_<name>); never owner',
  }),
  department: Type.Optional(Type.String({ maxLength: 100 })),
  title: Type.Optional(Type.String({ maxLength: 100 })),
  message: Type.Optional(Type.String({ maxLength: 500, description: 'Included in the invitation e-mail' })),
  expiresIn: Type.Optional(Lifetime),
};

const INVITE_DESCRIPTION =
  "Needs manage_team. The role (and extra permissions) may not reach beyond the caller's own (403). " +
  'An address that is already a member, or has a pending invitation, answers 409 MEMBER_ALREADY_EXISTS. ' +
  'inviteUrl is <ANVIL_PUBLIC_URL>/invite/<token>: a page served by the control plane that shows the ' +
  'invitation and, on its form, accepts it as POST /v2/accounts/team/invitations/{token}/accept does. When ANVIL_SMTP_URL is set the invitation is also ' +
  'e-mailed (emailDelivery tells how that went).';

const EmailDelivery = Type.Union([
  Type.Literal('sent'),
  Type.Literal('not_configured'),
  Type.Literal('failed'),
]);

export const teamRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const { team, invitations } = context.accounts;
  app.addSchema(MemberRecord);
  app.addSchema(InvitationRecord);
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/accounts/team/members',
    {
      config,
      schema: {
        tags,
        summary: 'Team members (active, suspended) and pending invitations, with counts per role',
        response: {
          200: Type.Object({
            members: Type.Array(Type.Ref('TeamMember')),
            total: Type.Integer(),
            roles: Type.Record(Type.String(), Type.Integer(), {
              description: 'owner, admin, developer, viewer, pending, and any custom role in use',
            }),
          }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request) => team.list(actorOf(request)),
  );

  app.post(
    '/v2/accounts/team/members',
    {
      config,
      schema: {
        tags,
        summary: 'Invite a member (short form)',
        description: INVITE_DESCRIPTION,
        body: Type.Object(inviteFields, { additionalProperties: false }),
        response: {
          201: Type.Object({
            invitationId: Type.String(),
            email: Type.String(),
            role: Type.String(),
            status: Type.String(),
            expiresAt: DateTime,
            inviteUrl: Type.String(),
            emailDelivery: EmailDelivery,
          }),
          ...flatErrors(400, 401, 403, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const { invitation, inviteUrl, emailDelivery } = await invitations.invite(
        actorOf(request),
        request.body,
      );
      return reply.code(201).send({
        invitationId: invitation.id,
        email: invitation.email,
        role: invitation.role,
        status: invitation.status,
        expiresAt: invitation.expiresAt,
        inviteUrl,
        emailDelivery,
      });
    },
  );

  app.post(
    '/v2/accounts/team/members/invite',
    {
      config,
      schema: {
        tags,
        summary: 'Invite a member',
        description: `${INVITE_DESCRIPTION} \`permissions\` are extra permissions the member holds beyond the role, within its scopes.`,
        body: Type.Object(
          {
            ...inviteFields,
            permissions: Type.Optional(Type.Array(Type.String({ maxLength: 32 }), { maxItems: 16 })),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({
            invitation: Type.Ref('Invitation'),
            message: Type.String(),
            emailDelivery: EmailDelivery,
          }),
          ...flatErrors(400, 401, 403, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const { invitation, emailDelivery } = await invitations.invite(actorOf(request), request.body);
      return reply
        .code(201)
        .send({ invitation, emailDelivery, message: `Invitation sent to ${invitation.email}` });
    },
  );

  app.post(
    '/v2/accounts/team/members/bulk',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) =>
          (request.body as { operation: string }).operation === 'update_role' ? 'role change' : null,
      },
      schema: {
        tags,
        summary: 'One operation on many members, with a result per member',
        description:
          'Needs manage_team. data.role for update_role, data.department (string or null) for ' +
          'update_department. Each member is judged on its own (owner, unknown id, role beyond the ' +
          'caller fail only that member): status is success or failed, updated tells whether anything changed.',
        body: Type.Object(
          {
            operation: Type.Unsafe<(typeof BULK_OPERATIONS)[number]>({
              type: 'string',
              enum: [...BULK_OPERATIONS],
            }),
            members: Type.Array(Type.String({ maxLength: 64 }), { minItems: 1, maxItems: 100 }),
            data: Type.Optional(
              Type.Object(
                {
                  role: Type.Optional(Type.String({ maxLength: 80 })),
                  department: Type.Optional(Nullable(Type.String({ maxLength: 100 }))),
                },
                { additionalProperties: false },
              ),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            operation: Type.String(),
            results: Type.Array(
              Type.Object({
                userId: Type.String(),
                status: Type.String(),
                updated: Type.Boolean(),
                memberStatus: Type.Optional(Type.String()),
                error: Type.Optional(Type.Object({ code: Type.String(), message: Type.String() })),
              }),
            ),
            summary: Type.Object({
              total: Type.Integer(),
              successful: Type.Integer(),
              failed: Type.Integer(),
            }),
          }),
          ...flatErrors(400, 401, 403, 429),
        },
      },
    },
    async (request) =>
      team.bulk(actorOf(request), request.body.operation, request.body.members, request.body.data ?? {}),
  );

  app.get(
    '/v2/accounts/team/members/:user_id',
    {
      config,
      schema: {
        tags,
        summary: 'Member detail with activity and resources',
        params: UserIdParams,
        response: {
          200: Type.Object({
            member: Type.Object({
              ...MemberRecord.properties,
              activity: Type.Object({
                endpointsCreated: Type.Integer(),
                clustersManaged: Type.Integer(),
                totalExecutions: Type.Integer(),
                lastLogin: Nullable(DateTime),
              }),
              resources: Type.Object({
                ownedEndpoints: Type.Integer(),
                ownedClusters: Type.Integer(),
                sharedEndpoints: Type.Integer(),
              }),
            }),
          }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => ({ member: await team.get(actorOf(request), request.params.user_id) }),
  );

  app.put(
    '/v2/accounts/team/members/:user_id',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) => {
          const body = request.body as { role?: string; permissions?: string[] };
          return body.role !== undefined || body.permissions !== undefined ? 'role change' : null;
        },
      },
      schema: {
        tags,
        summary: 'Change a member: role, custom permissions, department, title, suspend or reactivate',
        description:
          "Needs manage_team. Suspension stops the member's keys at once (401 on their next request); " +
          "reactivation restores them. The owner's role, permissions and status, and one's own, cannot be " +
          "changed (422 CANNOT_MODIFY_MEMBER). `permissions` replaces the member's custom permissions.",
        params: UserIdParams,
        body: Type.Object(
          {
            role: Type.Optional(Type.String({ minLength: 1, maxLength: 80 })),
            permissions: Type.Optional(Type.Array(Type.String({ maxLength: 32 }), { maxItems: 16 })),
            department: Type.Optional(Nullable(Type.String({ maxLength: 100 }))),
            title: Type.Optional(Nullable(Type.String({ maxLength: 100 }))),
            status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('suspended')])),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ member: Type.Ref('TeamMember'), message: Type.String() }),
          ...flatErrors(400, 401, 403, 404, 422, 429),
        },
      },
    },
    async (request) => {
      const { member } = await team.update(actorOf(request), request.params.user_id, request.body);
      return { member, message: `member ${member.id} updated` };
    },
  );

  app.delete(
    '/v2/accounts/team/members/:user_id',
    {
      config: { ...config, sensitive: 'member removal' },
      schema: {
        tags,
        summary: 'Remove a member: keys, grants and shares are revoked at once',
        params: UserIdParams,
        response: {
          200: Type.Object({
            id: Type.String(),
            status: Type.Literal('removed'),
            removedAt: DateTime,
            message: Type.String(),
          }),
          ...flatErrors(401, 403, 404, 422, 429),
        },
      },
    },
    async (request) => team.remove(actorOf(request), request.params.user_id),
  );

  app.get(
    '/v2/accounts/team/invitations',
    {
      config,
      schema: {
        tags,
        summary: 'Every invitation with its status (designed)',
        response: {
          200: Type.Object({ invitations: Type.Array(Type.Ref('Invitation')) }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request) => ({ invitations: await invitations.list(actorOf(request)) }),
  );

  const InvitationParams = Type.Object({ invitation_id: Type.String({ minLength: 1, maxLength: 64 }) });

  app.post(
    '/v2/accounts/team/invitations/:invitation_id/resend',
    {
      config,
      schema: {
        tags,
        summary: 'Resend a pending (or expired) invitation: new link, new expiry',
        params: InvitationParams,
        body: Type.Optional(
          Type.Object({ expiresIn: Type.Optional(Lifetime) }, { additionalProperties: false }),
        ),
        response: {
          200: Type.Object({
            invitation: Type.Ref('Invitation'),
            message: Type.String(),
            emailDelivery: EmailDelivery,
          }),
          ...flatErrors(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request) => {
      const result = await invitations.resend(
        actorOf(request),
        request.params.invitation_id,
        request.body?.expiresIn,
      );
      return { ...result, message: `Invitation resent to ${result.invitation.email}` };
    },
  );

  app.delete(
    '/v2/accounts/team/invitations/:invitation_id',
    {
      config,
      schema: {
        tags,
        summary: 'Cancel a pending invitation',
        params: InvitationParams,
        response: {
          200: Type.Object({ invitation: Type.Ref('Invitation'), message: Type.String() }),
          ...flatErrors(401, 403, 404, 409, 429),
        },
      },
    },
    async (request) => {
      const invitation = await invitations.cancel(actorOf(request), request.params.invitation_id);
      return { invitation, message: `Invitation to ${invitation.email} cancelled` };
    },
  );

  app.post(
    '/v2/accounts/team/invitations/:token/accept',
    {
      config: { public: true },
      schema: {
        tags,
        summary: 'Accept an invitation (no API key: the token from inviteUrl authenticates)',
        description:
          'The invitee becomes an active member with the invited role, department, title and permissions, ' +
          'and receives an API key (shown once): read & write when the role changes anything, read otherwise; ' +
          'scopes follow the role plus accounts. 404 INVITATION_NOT_FOUND for an unknown (or superseded) ' +
          'token, 409 INVITATION_NOT_PENDING once accepted or cancelled, 410 INVITATION_EXPIRED after expiry.',
        security: [],
        params: Type.Object({ token: Type.String({ minLength: 20, maxLength: 128 }) }),
        body: Type.Optional(
          Type.Object(
            {
              name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
              username: Type.Optional(
                Type.String({ minLength: 3, maxLength: 39, pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]*$' }),
              ),
            },
            { additionalProperties: false },
          ),
        ),
        response: {
          201: Type.Object({
            member: Type.Ref('TeamMember'),
            apiKey: Type.Object({ key: Type.Object(ApiKeyRecord.properties), value: Type.String() }),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 404, 409, 410),
        },
      },
    },
    async (request, reply) => {
      const result = await invitations.accept(request.params.token, request.body ?? {}, request.ip ?? null);
      return reply.code(201).send(result);
    },
  );

  app.get(
    '/v2/accounts/team/activity',
    {
      config,
      schema: {
        tags,
        summary: 'Team activity over a period, computed from recorded events',
        description:
          'Events: logins (a request after 30 minutes of silence starts a session), resources created, ' +
          'executions, collaborations (shares given and received, joining). activeMembers: members with ' +
          'any event in the period; newMembers: joined in it; collaborationScore: % of members who ' +
          'collaborated; activityGrowth: % change of events against the previous period of equal length; ' +
          "memberEngagement: active ÷ all members in %; retentionRate: % of the previous period's active " +
          'members active again. teamCollaboration: endpoints shared, resources shared across departments, ' +
          'collaboration events.',
        querystring: Type.Object(
          {
            period: Type.Optional(
              Type.String({ maxLength: 16, description: `${ACTIVITY_PERIODS.join(', ')}; default 30d` }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: AnyObject, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => team.activity(actorOf(request), request.query.period),
  );
};

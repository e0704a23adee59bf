import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { Actor } from '../../accounts/access.ts';

/** The caller of an authenticated route, as the domain sees it. */
export function actorOf(request: FastifyRequest): Actor {
  return { principal: request.principal!, ip: request.ip ?? null };
}

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
export const DateTime = Type.String({ format: 'date-time' });
export const NullableDateTime = Nullable(DateTime);
/** A free-form object in a response: serialised as it is. */
export const AnyObject = Type.Object({}, { additionalProperties: true });

export const MemberRecord = Type.Object(
  {
    id: Type.String({ description: 'usr_<id>; pending members carry their invitation id (inv_<id>)' }),
    email: Type.String(),
    name: Nullable(Type.String()),
    username: Nullable(Type.String()),
    avatar: Nullable(Type.String()),
    role: Type.String({ description: 'owner, admin, developer, viewer or role_custom_<name>' }),
    permissions: Type.Array(Type.String(), { description: 'Effective permission names' }),
    status: Type.String({ description: 'active, pending, suspended' }),
    joinedAt: Type.Optional(NullableDateTime),
    lastActive: Type.Optional(NullableDateTime),
    invitedAt: Type.Optional(DateTime),
    invitationExpires: Type.Optional(DateTime),
    invitedBy: Nullable(Type.String()),
    department: Nullable(Type.String()),
    title: Nullable(Type.String()),
    suspendedAt: Type.Optional(NullableDateTime),
  },
  { $id: 'TeamMember' },
);

export const InvitationRecord = Type.Object(
  {
    id: Type.String({ description: 'inv_<id>' }),
    email: Type.String(),
    role: Type.String(),
    permissions: Type.Array(Type.String()),
    status: Type.String({ description: 'sent, resent, cancelled, accepted; expired when past expiresAt' }),
    expiresAt: DateTime,
    inviteUrl: Type.Optional(
      Type.String({
        description: 'Console link carrying the acceptance token; returned only on invite and resend',
      }),
    ),
    department: Nullable(Type.String()),
    title: Nullable(Type.String()),
    message: Nullable(Type.String()),
    invitedBy: Type.String(),
    invitedAt: DateTime,
    resentAt: NullableDateTime,
    cancelledAt: NullableDateTime,
    acceptedAt: NullableDateTime,
  },
  { $id: 'Invitation' },
);

export const UserIdParams = Type.Object({ user_id: Type.String({ minLength: 1, maxLength: 64 }) });

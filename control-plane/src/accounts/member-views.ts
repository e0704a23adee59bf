import type { Invitation, User } from '../db/generated/client.ts';
import { type MemberAccess, permissionNames } from './access.ts';

const iso = (date: Date | null | undefined) => (date ? date.toISOString() : null);

export function avatarUrl(publicUrl: string, file: string | null): string | null {
  return file ? `${publicUrl}/avatars/${file}` : null;
}

/** Invitation status as shown: `expired` is derived from a pending invitation past its expiresAt. */
export function invitationStatus(row: Invitation, now: Date): string {
  if ((row.status === 'sent' || row.status === 'resent') && row.expiresAt <= now) return 'expired';
  return row.status;
}

export function isPending(row: Invitation, now: Date): boolean {
  return (row.status === 'sent' || row.status === 'resent') && row.expiresAt > now;
}

export function viewInvitation(row: Invitation, now: Date, inviteUrl?: string) {
  return {
    id: row.id,
    email: row.email,
    role: row.role,
    permissions: row.permissions,
    status: invitationStatus(row, now),
    expiresAt: row.expiresAt.toISOString(),
    ...(inviteUrl ? { inviteUrl } : {}),
    department: row.department,
    title: row.title,
    message: row.message,
    invitedBy: row.invitedById,
    invitedAt: row.createdAt.toISOString(),
    resentAt: iso(row.resentAt),
    cancelledAt: iso(row.cancelledAt),
    acceptedAt: iso(row.acceptedAt),
  };
}

/** A member of the team list (spec: Team member). */
export function viewMember(user: User, access: MemberAccess | undefined, publicUrl: string) {
  return {
    id: user.id,
    email: user.email,
    name: user.name,
    username: user.username,
    avatar: avatarUrl(publicUrl, user.avatarFile),
    role: user.role,
    permissions: access ? permissionNames(access) : [],
    status: user.status,
    joinedAt: iso(user.joinedAt ?? user.createdAt),
    lastActive: iso(user.lastActiveAt),
    invitedBy: user.invitedById,
    department: user.department,
    title: user.title,
    ...(user.status === 'suspended' ? { suspendedAt: iso(user.suspendedAt) } : {}),
  };
}

/** A pending member: the invitation shown in the team list, its id as placeholder. */
export function viewPendingMember(row: Invitation) {
  return {
    id: row.id,
    email: row.email,
    name: null,
    username: null,
    avatar: null,
    role: row.role,
    permissions: row.permissions,
    status: 'pending',
    invitedAt: row.createdAt.toISOString(),
    invitationExpires: row.expiresAt.toISOString(),
    invitedBy: row.invitedById,
    department: row.department,
    title: row.title,
  };
}

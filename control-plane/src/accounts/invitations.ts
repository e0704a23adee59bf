import { createHash, randomBytes } from 'node:crypto';
import { ApiError, newId } from '@anvil/shared';
import type { ApiKeyService, KeyView } from '../auth/api-keys.ts';
import type { Clock } from '../auth/clock.ts';
import type { Invitation } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import type { AccessControl, Actor } from './access.ts';
import type { ActivityTracker } from './activity.ts';
import { checkAssignableRole, keyGrantForRole } from './assign.ts';
import type { AuditLog } from './audit.ts';
import { isPending, viewInvitation, viewMember } from './member-views.ts';
import type { Notifier } from './notifications.ts';
import { checkEmail, checkPermissions, validationError } from './validation.ts';
import { enqueueWebhookEvent, MEMBER_JOINED_EVENT } from './webhook-outbox.ts';

export const INVITATION_LIFETIMES = { '1d': 1, '7d': 7, '30d': 30 } as const;
export type InvitationLifetime = keyof typeof INVITATION_LIFETIMES;

export interface InviteInput {
  email: string;
  role: string;
  department?: string | undefined;
  title?: string | undefined;
  message?: string | undefined;
  expiresIn?: string | undefined;
  permissions?: string[] | undefined;
}

export interface AcceptInput {
  name?: string | undefined;
  username?: string | undefined;
}

export type EmailDelivery = 'sent' | 'not_configured' | 'failed';

export interface InvitationPreview {
  email: string;
  role: string;
  /** null when the account row is gone (the invitation goes with it, so only in a race). */
  accountName: string | null;
  /** The inviter's name, else e-mail; null when that member is gone. */
  invitedBy: string | null;
  message: string | null;
  expiresAt: Date;
}

/** Days an invitation stays valid for `expiresIn` (1d, 7d or 30d; default 7d). */
function lifetimeDays(expiresIn: string | undefined): number {
  const lifetime = expiresIn ?? '7d';
  if (!(lifetime in INVITATION_LIFETIMES)) {
    throw validationError('expiresIn', `must be one of ${Object.keys(INVITATION_LIFETIMES).join(', ')}`);
  }
  return INVITATION_LIFETIMES[lifetime as InvitationLifetime];
}

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
const MANAGE_TEAM = { permission: 'manage_team', scope: 'accounts' } as const;

/**
 * Invitations: sent → (resent)* → accepted | cancelled; a pending invitation past its expiresAt is
 * expired (it can be resent, which re-arms it). The invite URL carries a 256-bit token, stored only as
 * its SHA-256; resending issues a new token, so an older link stops working. Accepting
 * (POST /v2/accounts/team/invitations/{token}/accept, no key needed) makes the invitee an active member
 * with the invited role and returns their first API key, once.
 */
export class InvitationService {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      access: AccessControl;
      audit: AuditLog;
      apiKeys: ApiKeyService;
      notifier: Notifier;
      activity: ActivityTracker;
      publicUrl: string;
      logger: Logger;
    },
  ) {}

  private inviteUrl(token: string): string {
    return `${this.deps.publicUrl}/invite/${token}`;
  }

  async invite(actor: Actor, input: InviteInput) {
    const { db, clock, access } = this.deps;
    const member = await access.require(actor, { ...MANAGE_TEAM, action: 'invite_attempt' });
    const email = checkEmail(input.email);
    const days = lifetimeDays(input.expiresIn);
    const resolved = await checkAssignableRole(access, member, input.role);
    const permissions = checkPermissions(input.permissions ?? []);
    if (permissions.length > 0) await access.assertCanConfer(member, permissions, [...resolved.scopes]);

    const now = clock.now();
    const existing = await db.prisma.user.findFirst({
      where: {
        accountId: member.accountId,
        email: { equals: email, mode: 'insensitive' },
        status: { not: 'removed' },
      },
    });
    if (existing) {
      throw new ApiError('MEMBER_ALREADY_EXISTS', `${email} is already a member of this team`, {
        email,
        currentRole: existing.role,
        userId: existing.id,
      });
    }
    const pending = (
      await db.prisma.invitation.findMany({
        where: {
          accountId: member.accountId,
          email: { equals: email, mode: 'insensitive' },
          status: { in: ['sent', 'resent'] },
        },
      })
    ).find((row) => isPending(row, now));
    if (pending) {
      throw new ApiError('MEMBER_ALREADY_EXISTS', `${email} already has a pending invitation; resend it`, {
        email,
        currentRole: 'pending',
        invitationId: pending.id,
      });
    }

    return this.issue(member.accountId, {
      email,
      role: input.role,
      permissions,
      department: input.department ?? null,
      title: input.title ?? null,
      message: input.message ?? null,
      days,
      invitedBy: { userId: member.userId, name: member.name ?? member.email, ip: actor.ip },
    });
  }

  /**
   * An operator's invitation to own a new account (POST /v2/admin/accounts): the same token, expiry,
   * e-mail and acceptance as a team invitation, from someone who is not a member of that account.
   */
  async inviteOwner(input: {
    accountId: string;
    email: string;
    expiresIn?: string | undefined;
    message?: string | undefined;
    invitedBy: { userId: string; name: string; ip: string | null };
  }) {
    const days = lifetimeDays(input.expiresIn);
    return this.issue(input.accountId, {
      email: checkEmail(input.email),
      role: 'owner',
      permissions: [],
      department: null,
      title: null,
      message: input.message ?? null,
      days,
      invitedBy: input.invitedBy,
    });
  }

  /** Stores an invitation (only its token's hash), records it in the account's audit log, e-mails it. */
  private async issue(
    accountId: string,
    fields: {
      email: string;
      role: string;
      permissions: string[];
      department: string | null;
      title: string | null;
      message: string | null;
      days: number;
      invitedBy: { userId: string; name: string; ip: string | null };
    },
  ) {
    const { db, clock } = this.deps;
    const now = clock.now();
    const token = randomBytes(32).toString('base64url');
    const row = await db.prisma.invitation.create({
      data: {
        id: newId('inv'),
        accountId,
        email: fields.email,
        role: fields.role,
        permissions: fields.permissions,
        department: fields.department,
        title: fields.title,
        message: fields.message,
        tokenHash: hashToken(token),
        status: 'sent',
        expiresAt: new Date(now.getTime() + fields.days * 86_400_000),
        invitedById: fields.invitedBy.userId,
        createdAt: now,
      },
    });
    await this.deps.audit.record({
      accountId,
      type: 'role_assignment',
      action: 'member_invited',
      actor: { userId: fields.invitedBy.userId, ip: fields.invitedBy.ip },
      details: { invitationId: row.id, email: fields.email, role: row.role, permissions: fields.permissions },
    });
    const inviteUrl = this.inviteUrl(token);
    const emailDelivery = await this.sendInvitationEmail(row, inviteUrl, fields.invitedBy.name);
    return { invitation: viewInvitation(row, now, inviteUrl), inviteUrl, emailDelivery };
  }

  async list(actor: Actor) {
    const member = await this.deps.access.require(actor, {
      ...MANAGE_TEAM,
      action: 'list_invitations_attempt',
    });
    const rows = await this.deps.db.prisma.invitation.findMany({
      where: { accountId: member.accountId },
      orderBy: { createdAt: 'desc' },
    });
    const now = this.deps.clock.now();
    return rows.map((row) => viewInvitation(row, now));
  }

  private async find(accountId: string, invitationId: string): Promise<Invitation> {
    const row = await this.deps.db.prisma.invitation.findFirst({ where: { id: invitationId, accountId } });
    if (!row) {
      throw new ApiError('INVITATION_NOT_FOUND', `no invitation ${invitationId} in this account`, {
        invitationId,
      });
    }
    return row;
  }

  /** Resending re-arms the invitation: a new token (the old link stops), a new expiry, resentAt. */
  async resend(actor: Actor, invitationId: string, expiresIn?: string) {
    const { db, clock, access } = this.deps;
    const member = await access.require(actor, { ...MANAGE_TEAM, action: 'resend_attempt' });
    const row = await this.find(member.accountId, invitationId);
    if (row.status !== 'sent' && row.status !== 'resent') {
      throw new ApiError('INVITATION_NOT_PENDING', `invitation ${invitationId} is ${row.status}`, {
        invitationId,
        status: row.status,
      });
    }
    const lifetime = expiresIn ?? '7d';
    if (!(lifetime in INVITATION_LIFETIMES)) {
      throw validationError('expiresIn', `must be one of ${Object.keys(INVITATION_LIFETIMES).join(', ')}`);
    }
    const now = clock.now();
    const token = randomBytes(32).toString('base64url');
    const updated = await db.prisma.invitation.update({
      where: { id: row.id },
      data: {
        status: 'resent',
        resentAt: now,
        tokenHash: hashToken(token),
        expiresAt: new Date(
          now.getTime() + INVITATION_LIFETIMES[lifetime as InvitationLifetime] * 86_400_000,
        ),
      },
    });
    const inviteUrl = this.inviteUrl(token);
    const emailDelivery = await this.sendInvitationEmail(updated, inviteUrl, member.name ?? member.email);
    return { invitation: viewInvitation(updated, now, inviteUrl), emailDelivery };
  }

  async cancel(actor: Actor, invitationId: string) {
    const { db, clock, access } = this.deps;
    const member = await access.require(actor, { ...MANAGE_TEAM, action: 'cancel_invitation_attempt' });
    const row = await this.find(member.accountId, invitationId);
    if (row.status !== 'sent' && row.status !== 'resent') {
      throw new ApiError('INVITATION_NOT_PENDING', `invitation ${invitationId} is ${row.status}`, {
        invitationId,
        status: row.status,
      });
    }
    const now = clock.now();
    const updated = await db.prisma.invitation.update({
      where: { id: row.id },
      data: { status: 'cancelled', cancelledAt: now },
    });
    await this.deps.audit.record({
      accountId: member.accountId,
      type: 'role_assignment',
      action: 'invitation_cancelled',
      actor: { userId: member.userId, ip: actor.ip },
      details: { invitationId, email: row.email, role: row.role },
    });
    return viewInvitation(updated, now);
  }

  /**
   * The pending invitation a token names, or the error accepting it would give: what the invitation page
   * shows before the invitee accepts. Reading it changes nothing (link previewers fetch such URLs).
   */
  private async pendingByToken(token: string): Promise<Invitation> {
    const row = await this.deps.db.prisma.invitation.findUnique({ where: { tokenHash: hashToken(token) } });
    if (!row) {
      throw new ApiError(
        'INVITATION_NOT_FOUND',
        'no invitation has this token (it may have been resent)',
        {},
      );
    }
    if (row.status !== 'sent' && row.status !== 'resent') {
      throw new ApiError('INVITATION_NOT_PENDING', `this invitation is ${row.status}`, {
        invitationId: row.id,
        status: row.status,
      });
    }
    if (row.expiresAt <= this.deps.clock.now()) {
      throw new ApiError('INVITATION_EXPIRED', 'this invitation has expired; ask for it to be resent', {
        invitationId: row.id,
        expiredAt: row.expiresAt.toISOString(),
      });
    }
    return row;
  }

  /** Who invites whom to what, for the invitation page: read from the invitation, its account and inviter. */
  async preview(token: string): Promise<InvitationPreview> {
    const row = await this.pendingByToken(token);
    const [account, inviter] = await Promise.all([
      this.deps.db.prisma.account.findUnique({ where: { id: row.accountId }, select: { name: true } }),
      this.deps.db.prisma.user.findUnique({
        where: { id: row.invitedById },
        select: { name: true, email: true },
      }),
    ]);
    return {
      email: row.email,
      role: row.role,
      accountName: account?.name ?? null,
      invitedBy: inviter ? (inviter.name ?? inviter.email) : null,
      message: row.message,
      expiresAt: row.expiresAt,
    };
  }

  async accept(token: string, input: AcceptInput, ip: string | null) {
    const { db, clock, access, apiKeys } = this.deps;
    const row = await this.pendingByToken(token);
    const now = clock.now();
    const resolved = await access.resolveRoleOf(row.accountId, row.role);
    const user = await db.prisma.$transaction(async (tx) => {
      const claimed = await tx.invitation.updateMany({
        where: { id: row.id, status: { in: ['sent', 'resent'] } },
        data: { status: 'accepted', acceptedAt: now },
      });
      if (claimed.count === 0) {
        throw new ApiError('INVITATION_NOT_PENDING', 'this invitation was accepted or cancelled meanwhile', {
          invitationId: row.id,
        });
      }
      const previous = await tx.user.findFirst({
        where: { accountId: row.accountId, email: { equals: row.email, mode: 'insensitive' } },
      });
      if (previous && previous.status !== 'removed') {
        throw new ApiError('MEMBER_ALREADY_EXISTS', `${row.email} is already a member of this team`, {
          email: row.email,
          currentRole: previous.role,
        });
      }
      const data = {
        name: input.name ?? previous?.name ?? null,
        username: input.username ?? previous?.username ?? null,
        role: row.role,
        status: 'active',
        department: row.department,
        title: row.title,
        customPermissions: row.permissions,
        invitedById: row.invitedById,
        joinedAt: now,
        // The token reached the invitee at this address (or through whoever they gave it to).
        verified: true,
        suspendedAt: null,
        removedAt: null,
      };
      const member = previous
        ? await tx.user.update({ where: { id: previous.id }, data })
        : await tx.user.create({
            data: { id: newId('usr'), accountId: row.accountId, email: row.email, createdAt: now, ...data },
          });
      await tx.invitation.update({ where: { id: row.id }, data: { acceptedUserId: member.id } });
      await enqueueWebhookEvent(tx, {
        accountId: row.accountId,
        type: MEMBER_JOINED_EVENT,
        data: {
          user_id: member.id,
          email: member.email,
          name: member.name,
          role: member.role,
          invitation_id: row.id,
          invited_by: row.invitedById,
          joined_at: now.toISOString(),
        },
      });
      return member;
    });
    const grant = keyGrantForRole(resolved);
    const key: { key: KeyView; value: string } = await apiKeys.issue({
      accountId: row.accountId,
      userId: user.id,
      name: 'First key (invitation)',
      description: `Issued when ${row.email} accepted invitation ${row.id}`,
      permissions: grant.permissions,
      scopes: grant.scopes,
      environment: 'live',
      createdById: null,
    });
    await this.deps.audit.record({
      accountId: row.accountId,
      type: 'role_assignment',
      action: 'invitation_accepted',
      actor: { userId: user.id, ip },
      target: { userId: user.id, name: user.name ?? user.email },
      details: { invitationId: row.id, role: row.role, invitedBy: row.invitedById, newRole: row.role },
    });
    await this.deps.activity.recordMany([
      { accountId: row.accountId, userId: user.id, kind: 'collaboration' },
      { accountId: row.accountId, userId: row.invitedById, kind: 'collaboration' },
    ]);
    const memberAccess = await access.load(row.accountId, user.id);
    return {
      member: viewMember(user, memberAccess ?? undefined, this.deps.publicUrl),
      apiKey: key,
      message: 'Welcome aboard. Store this API key now: it will not be shown again.',
    };
  }

  private async sendInvitationEmail(
    row: Invitation,
    inviteUrl: string,
    inviter: string,
  ): Promise<EmailDelivery> {
    const { notifier, logger } = this.deps;
    if (!notifier.emailConfigured) return 'not_configured';
    const account = await this.deps.db.prisma.account.findUnique({ where: { id: row.accountId } });
    const lines = [
      `${inviter} invited you to join ${account?.name ?? 'a team'} on Anvil as ${row.role}.`,
      ...(row.message ? ['', row.message] : []),
      '',
      `Accept the invitation: ${inviteUrl}`,
      `It expires at ${row.expiresAt.toISOString()}.`,
    ];
    try {
      await notifier.email({
        to: row.email,
        subject: `You are invited to ${account?.name ?? 'a team'} on Anvil`,
        text: lines.join('\n'),
      });
      return 'sent';
    } catch (error) {
      logger.warn({ err: error, invitation_id: row.id }, 'invitation e-mail failed');
      return 'failed';
    }
  }
}

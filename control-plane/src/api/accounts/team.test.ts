import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { addMember, addResource, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';
import { type SmtpReceiver, startSmtpReceiver } from '../../testing/receivers.ts';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

describe('team', () => {
  let t: TestApp;
  let clock: ManualClock;
  let smtp: SmtpReceiver;
  let admin: TestMember;
  let dev: TestMember;

  beforeAll(async () => {
    smtp = await startSmtpReceiver();
  });
  afterAll(async () => smtp.close());

  beforeEach(async () => {
    clock = new ManualClock(new Date('2026-05-04T09:00:00Z'));
    t = await createTestApp({
      clock,
      env: {
        ANVIL_PUBLIC_URL: 'https://anvil.example.com',
        ANVIL_SMTP_URL: smtp.url,
        ANVIL_SMTP_FROM: 'Anvil <noreply@anvil.test>',
      },
    });
    admin = await addMember(t, { role: 'admin', name: 'Ada' });
    dev = await addMember(t, { role: 'developer', name: 'Dee', department: 'research' });
    smtp.messages.length = 0;
  });
  afterEach(async () => t.close());

  const invite = (body: Record<string, unknown>, key?: TestMember, short = false) =>
    call(t, {
      method: 'POST',
      url: short ? '/v2/accounts/team/members' : '/v2/accounts/team/members/invite',
      payload: body,
      ...(key ? { key } : {}),
    });
  const tokenOf = (inviteUrl: string) => inviteUrl.slice(inviteUrl.lastIndexOf('/') + 1);
  const accept = (token: string, body: Record<string, unknown> = {}) =>
    t.app.inject({ method: 'POST', url: `/v2/accounts/team/invitations/${token}/accept`, payload: body });

  it('lists members and pending invitations with counts per role', async () => {
    await invite({ email: 'new@example.com', role: 'viewer' });
    await addMember(t, { role: 'viewer', status: 'suspended' });
    const res = await call(t, { url: '/v2/accounts/team/members', key: dev });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.total).toBe(5);
    expect(body.roles).toEqual({ owner: 1, admin: 1, developer: 1, viewer: 1, pending: 1 });
    const owner = body.members.find((m: { role: string }) => m.role === 'owner');
    expect(owner).toMatchObject({
      id: t.userId,
      email: 'admin@localhost',
      status: 'active',
      permissions: expect.any(Array),
    });
    expect(owner.permissions).toHaveLength(7);
    const developer = body.members.find((m: { id: string }) => m.id === dev.userId);
    expect(developer).toMatchObject({
      name: 'Dee',
      role: 'developer',
      permissions: ['read', 'write', 'execute'],
      status: 'active',
      department: 'research',
      avatar: null,
    });
    const pending = body.members.find((m: { status: string }) => m.status === 'pending');
    expect(pending).toMatchObject({
      email: 'new@example.com',
      role: 'viewer',
      name: null,
      invitedBy: t.userId,
      invitedAt: clock.now().toISOString(),
      invitationExpires: new Date(clock.now().getTime() + 7 * DAY).toISOString(),
    });
    expect(pending.id).toMatch(/^inv_/);
    expect(body.members.filter((m: { status: string }) => m.status === 'suspended')).toHaveLength(1);
  });

  it('invites through both routes, with expiresIn and the invitation e-mailed', async () => {
    const res = await invite(
      {
        email: 'Grace@Example.COM',
        role: 'developer',
        department: 'research',
        title: 'ML engineer',
        message: 'Join us on the training team',
        expiresIn: '1d',
        permissions: ['read'],
      },
      admin,
    );
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body.invitation).toMatchObject({
      email: 'Grace@example.com',
      role: 'developer',
      status: 'sent',
      expiresAt: new Date(clock.now().getTime() + DAY).toISOString(),
      department: 'research',
      title: 'ML engineer',
      permissions: ['read'],
    });
    expect(body.invitation.id).toMatch(/^inv_/);
    expect(body.invitation.inviteUrl).toMatch(/^https:\/\/anvil\.example\.com\/invite\/[\w-]{43}$/);
    expect(body.emailDelivery).toBe('sent');
    expect(body.message).toMatch(/Grace@example.com/);
    expect(smtp.messages).toHaveLength(1);
    expect(smtp.messages[0]!.to).toEqual(['Grace@example.com']);
    expect(smtp.messages[0]!.raw).toContain('Join us on the training team');
    expect(smtp.messages[0]!.raw.replace(/=\r\n/g, '')).toContain(tokenOf(body.invitation.inviteUrl));
    const row = await t.context.db.prisma.invitation.findUniqueOrThrow({ where: { id: body.invitation.id } });
    expect(JSON.stringify(row)).not.toContain(tokenOf(body.invitation.inviteUrl));

    const short = await invite(
      { email: 'sam@example.com', role: 'viewer', expiresIn: '30d' },
      undefined,
      true,
    );
    expect(short.statusCode).toBe(201);
    expect(short.json()).toMatchObject({
      email: 'sam@example.com',
      role: 'viewer',
      status: 'sent',
      expiresAt: new Date(clock.now().getTime() + 30 * DAY).toISOString(),
      emailDelivery: 'sent',
    });
    expect(short.json().invitationId).toMatch(/^inv_/);
    expect(short.json().inviteUrl).toMatch(/\/invite\//);
  });

  it('refuses the owner role, existing members, duplicate invitations and non-managers', async () => {
    const owner = await invite({ email: 'x@example.com', role: 'owner' });
    expect(owner.statusCode).toBe(400);
    expect(owner.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'role' } });
    const exists = await invite({ email: dev.email.toUpperCase(), role: 'viewer' });
    expect(exists.statusCode).toBe(409);
    expect(exists.json()).toMatchObject({
      error: 'MEMBER_ALREADY_EXISTS',
      details: { currentRole: 'developer' },
    });
    expect((await invite({ email: 'twice@example.com', role: 'viewer' })).statusCode).toBe(201);
    const twice = await invite({ email: 'twice@example.com', role: 'admin' });
    expect(twice.statusCode).toBe(409);
    expect(twice.json().details).toMatchObject({ email: 'twice@example.com', currentRole: 'pending' });
    const byDev = await invite({ email: 'y@example.com', role: 'viewer' }, dev);
    expect(byDev.statusCode).toBe(403);
    expect(byDev.json().error).toBe('INSUFFICIENT_PERMISSIONS');
    const badEmail = await invite({ email: 'not-an-email', role: 'viewer' });
    expect(badEmail.statusCode).toBe(400);
    expect(badEmail.json()).toMatchObject({
      error: 'INVALID_EMAIL',
      details: { field: 'email', value: 'not-an-email' },
    });
    expect(await t.context.db.prisma.invitation.count()).toBe(1);
  });

  it('accepts an invitation: a new active member with a working key, once', async () => {
    const sent = (
      await invite({ email: 'lin@example.com', role: 'developer', department: 'infra', title: 'SRE' }, admin)
    ).json();
    const token = tokenOf(sent.invitation.inviteUrl);
    clock.advance(HOUR);
    const res = await accept(token, { name: 'Lin' });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body.member).toMatchObject({
      email: 'lin@example.com',
      name: 'Lin',
      role: 'developer',
      status: 'active',
      department: 'infra',
      title: 'SRE',
      invitedBy: admin.userId,
      joinedAt: clock.now().toISOString(),
      permissions: ['read', 'write', 'execute'],
    });
    expect(body.apiKey.value).toMatch(/^anv_live_/);
    expect(body.apiKey.key).toMatchObject({
      type: 'read_write',
      permissions: ['read', 'write'],
      scopes: ['accounts', 'clusters', 'endpoints', 'training', 'ai'],
      userId: body.member.id,
    });
    const profile = await call(t, { url: '/v2/accounts/profile', key: body.apiKey.value });
    expect(profile.json()).toMatchObject({ id: body.member.id, email: 'lin@example.com', verified: true });
    const again = await accept(token);
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ error: 'INVITATION_NOT_PENDING', details: { status: 'accepted' } });
    const unknown = await accept('x'.repeat(43));
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error).toBe('INVITATION_NOT_FOUND');
    const invitations = (await call(t, { url: '/v2/accounts/team/invitations' })).json().invitations;
    expect(invitations[0]).toMatchObject({ status: 'accepted', acceptedAt: clock.now().toISOString() });
    const audit = (await call(t, { url: '/v2/accounts/permissions/audit?type=role_assignment' })).json();
    expect(audit.events.map((e: { action: string }) => e.action)).toEqual([
      'invitation_accepted',
      'member_invited',
    ]);
  });

  it('gives a viewer a read key, and lets a removed member be invited back', async () => {
    const sent = (await invite({ email: 'vic@example.com', role: 'viewer' })).json();
    const joined = (await accept(tokenOf(sent.invitation.inviteUrl))).json();
    expect(joined.apiKey.key).toMatchObject({ type: 'read', permissions: ['read'] });
    await call(t, { method: 'DELETE', url: `/v2/accounts/team/members/${joined.member.id}` });
    const back = (await invite({ email: 'vic@example.com', role: 'developer' })).json();
    const rejoined = await accept(tokenOf(back.invitation.inviteUrl));
    expect(rejoined.statusCode).toBe(201);
    expect(rejoined.json().member).toMatchObject({
      id: joined.member.id,
      role: 'developer',
      status: 'active',
    });
  });

  it('expires invitations; resending re-arms them with a new link; cancelling ends them', async () => {
    const sent = (await invite({ email: 'exp@example.com', role: 'viewer', expiresIn: '1d' })).json();
    const firstToken = tokenOf(sent.invitation.inviteUrl);
    clock.advance(DAY + 1);
    const expired = await accept(firstToken);
    expect(expired.statusCode).toBe(410);
    expect(expired.json()).toMatchObject({
      error: 'INVITATION_EXPIRED',
      details: { invitationId: sent.invitation.id },
    });
    const listed = (await call(t, { url: '/v2/accounts/team/members' })).json();
    expect(listed.roles.pending).toBe(0);

    const resent = await call(t, {
      method: 'POST',
      url: `/v2/accounts/team/invitations/${sent.invitation.id}/resend`,
    });
    expect(resent.statusCode).toBe(200);
    expect(resent.json().invitation).toMatchObject({
      id: sent.invitation.id,
      email: 'exp@example.com',
      status: 'resent',
      resentAt: clock.now().toISOString(),
      expiresAt: new Date(clock.now().getTime() + 7 * DAY).toISOString(),
    });
    expect(typeof resent.json().message).toBe('string');
    expect(smtp.messages).toHaveLength(2);
    expect((await accept(firstToken)).statusCode).toBe(404);

    const cancelled = await call(t, {
      method: 'DELETE',
      url: `/v2/accounts/team/invitations/${sent.invitation.id}`,
    });
    expect(cancelled.statusCode).toBe(200);
    expect(cancelled.json().invitation).toMatchObject({
      id: sent.invitation.id,
      status: 'cancelled',
      cancelledAt: clock.now().toISOString(),
    });
    const newToken = tokenOf(resent.json().invitation.inviteUrl);
    expect((await accept(newToken)).json()).toMatchObject({
      error: 'INVITATION_NOT_PENDING',
      details: { status: 'cancelled' },
    });
    const twice = await call(t, {
      method: 'DELETE',
      url: `/v2/accounts/team/invitations/${sent.invitation.id}`,
    });
    expect(twice.statusCode).toBe(409);
    const resendCancelled = await call(t, {
      method: 'POST',
      url: `/v2/accounts/team/invitations/${sent.invitation.id}/resend`,
    });
    expect(resendCancelled.statusCode).toBe(409);
    const missing = await call(t, { method: 'DELETE', url: '/v2/accounts/team/invitations/inv_missing' });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error).toBe('INVITATION_NOT_FOUND');
  });

  it('shows member detail with activity and resources from real events', async () => {
    // Two sessions: requests 31 minutes apart are two logins.
    await call(t, { url: '/v2/accounts/profile', key: dev });
    clock.advance(31 * 60_000);
    await call(t, { url: '/v2/accounts/profile', key: dev });
    clock.advance(60_000);
    await call(t, { url: '/v2/accounts/profile', key: dev });
    await addResource(t, dev, 'ep_one', 'one');
    await addResource(t, dev, 'ep_two', 'two');
    await addResource(t, dev, 'cluster_one', 'c1');
    await addResource(t, admin, 'ep_admin', 'shared');
    await call(t, {
      method: 'POST',
      url: '/v2/accounts/permissions/resources/ep_admin/share',
      key: admin,
      payload: { users: [dev.userId], permissions: ['execute'] },
    });
    await t.context.accounts.resources.recordExecution(t.accountId, dev.userId, 'ep_one');
    const res = await call(t, { url: `/v2/accounts/team/members/${dev.userId}`, key: admin });
    expect(res.statusCode).toBe(200);
    const member = res.json().member;
    expect(member).toMatchObject({
      id: dev.userId,
      role: 'developer',
      lastActive: clock.now().toISOString(),
      activity: {
        endpointsCreated: 2,
        clustersManaged: 1,
        totalExecutions: 1,
        lastLogin: new Date(clock.now().getTime() - 60_000).toISOString(),
      },
      resources: { ownedEndpoints: 2, ownedClusters: 1, sharedEndpoints: 1 },
    });
    const pending = (await invite({ email: 'p@example.com', role: 'viewer' })).json();
    const pendingDetail = await call(t, { url: `/v2/accounts/team/members/${pending.invitation.id}` });
    expect(pendingDetail.json().member).toMatchObject({ status: 'pending', email: 'p@example.com' });
    const none = await call(t, { url: '/v2/accounts/team/members/usr_nobody' });
    expect(none.statusCode).toBe(404);
    expect(none.json()).toMatchObject({ error: 'MEMBER_NOT_FOUND', details: { userId: 'usr_nobody' } });
  });

  it('updates role, permissions, department and title, and audits the role change', async () => {
    const res = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${dev.userId}`,
      key: admin,
      payload: { role: 'viewer', permissions: ['execute'], department: 'platform', title: 'Lead' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().member).toMatchObject({
      role: 'viewer',
      department: 'platform',
      title: 'Lead',
      permissions: ['read', 'execute'],
    });
    const check = await call(t, {
      method: 'POST',
      url: '/v2/accounts/permissions/check',
      key: dev,
      payload: { permission: 'execute', scope: 'clusters' },
    });
    expect(check.json()).toMatchObject({ allowed: true, source: 'custom_permission' });
    expect(
      (await call(t, { url: '/v2/accounts/permissions/me', key: dev })).json().customPermissions,
    ).toEqual(['execute']);
    const audit = (await call(t, { url: `/v2/accounts/permissions/audit?userId=${dev.userId}` })).json();
    expect(audit.events.map((e: { action: string }) => e.action).sort()).toEqual([
      'custom_permissions_updated',
      'role_updated',
    ]);
  });

  it('refuses changing the owner, oneself, or someone above the caller', async () => {
    const owner = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${t.userId}`,
      key: admin,
      payload: { status: 'suspended' },
    });
    expect(owner.statusCode).toBe(422);
    expect(owner.json().error).toBe('CANNOT_MODIFY_MEMBER');
    const self = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${admin.userId}`,
      key: admin,
      payload: { role: 'developer' },
    });
    expect(self.statusCode).toBe(422);
    const ownerTitle = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${t.userId}`,
      key: admin,
      payload: { title: 'Founder' },
    });
    expect(ownerTitle.statusCode).toBe(200);
    const byDev = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${admin.userId}`,
      key: dev,
      payload: { title: 'x' },
    });
    expect(byDev.statusCode).toBe(403);
    const toOwner = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${dev.userId}`,
      payload: { role: 'owner' },
    });
    expect(toOwner.statusCode).toBe(400);
    expect(toOwner.json().details.field).toBe('role');
  });

  it('suspends a member: their keys stop at once; reactivation restores them', async () => {
    expect((await call(t, { url: '/v2/auth/verify', key: dev })).statusCode).toBe(200);
    const suspended = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${dev.userId}`,
      key: admin,
      payload: { status: 'suspended' },
    });
    expect(suspended.statusCode).toBe(200);
    expect(suspended.json().member).toMatchObject({
      status: 'suspended',
      suspendedAt: clock.now().toISOString(),
      permissions: [],
    });
    const refused = await call(t, { url: '/v2/auth/verify', key: dev });
    expect(refused.statusCode).toBe(401);
    expect(refused.json()).toMatchObject({ error: 'UNAUTHORIZED', details: { reason: 'owner_inactive' } });
    const reactivated = await call(t, {
      method: 'PUT',
      url: `/v2/accounts/team/members/${dev.userId}`,
      key: admin,
      payload: { status: 'active' },
    });
    expect(reactivated.json().member.status).toBe('active');
    expect((await call(t, { url: '/v2/auth/verify', key: dev })).statusCode).toBe(200);
  });

  it('removes a member: keys, grants and shares revoked at once; the owner cannot be removed', async () => {
    await call(t, {
      method: 'POST',
      url: `/v2/accounts/permissions/${dev.userId}/grant`,
      payload: { permissions: ['manage_team'], scopes: ['accounts'] },
    });
    await addResource(t, admin, 'cluster_a', 'a');
    await call(t, {
      method: 'POST',
      url: '/v2/accounts/permissions/resources/cluster_a/share',
      key: admin,
      payload: { users: [dev.userId], permissions: ['write'] },
    });
    expect((await call(t, { url: '/v2/auth/verify', key: dev })).statusCode).toBe(200);
    const res = await call(t, {
      method: 'DELETE',
      url: `/v2/accounts/team/members/${dev.userId}`,
      key: admin,
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      id: dev.userId,
      status: 'removed',
      removedAt: clock.now().toISOString(),
    });
    expect(typeof res.json().message).toBe('string');
    const refused = await call(t, { url: '/v2/auth/verify', key: dev });
    expect(refused.statusCode).toBe(401);
    const p = t.context.db.prisma;
    expect(await p.apiKey.count({ where: { userId: dev.userId, status: { not: 'revoked' } } })).toBe(0);
    expect(await p.permissionGrant.count({ where: { userId: dev.userId, status: 'active' } })).toBe(0);
    expect(await p.resourceShare.count({ where: { userId: dev.userId, status: 'active' } })).toBe(0);
    const list = (await call(t, { url: '/v2/accounts/team/members' })).json();
    expect(list.members.map((m: { id: string }) => m.id)).not.toContain(dev.userId);
    expect((await call(t, { url: `/v2/accounts/team/members/${dev.userId}` })).statusCode).toBe(404);

    const owner = await call(t, {
      method: 'DELETE',
      url: `/v2/accounts/team/members/${t.userId}`,
      key: admin,
    });
    expect(owner.statusCode).toBe(422);
    expect(owner.json()).toMatchObject({
      error: 'CANNOT_REMOVE_OWNER',
      details: { userId: t.userId, role: 'owner' },
    });
    const byViewer = await addMember(t, { role: 'viewer' });
    expect(
      (await call(t, { method: 'DELETE', url: `/v2/accounts/team/members/${admin.userId}`, key: byViewer }))
        .statusCode,
    ).toBe(403);
  });

  it('runs bulk operations with a result per member', async () => {
    const v1 = await addMember(t, { role: 'viewer' });
    const v2 = await addMember(t, { role: 'viewer' });
    const bulk = (body: Record<string, unknown>, key?: TestMember) =>
      call(t, {
        method: 'POST',
        url: '/v2/accounts/team/members/bulk',
        payload: body,
        ...(key ? { key } : {}),
      });
    const roles = await bulk(
      {
        operation: 'update_role',
        members: [v1.userId, v2.userId, t.userId, 'usr_ghost'],
        data: { role: 'developer' },
      },
      admin,
    );
    expect(roles.statusCode).toBe(200);
    expect(roles.json()).toMatchObject({
      operation: 'update_role',
      summary: { total: 4, successful: 2, failed: 2 },
    });
    const results = roles.json().results;
    expect(results[0]).toMatchObject({ userId: v1.userId, status: 'success', updated: true });
    expect(results[2]).toMatchObject({
      userId: t.userId,
      status: 'failed',
      updated: false,
      error: { code: 'CANNOT_MODIFY_MEMBER' },
    });
    expect(results[3]).toMatchObject({
      userId: 'usr_ghost',
      status: 'failed',
      error: { code: 'MEMBER_NOT_FOUND' },
    });
    const dept = await bulk({
      operation: 'update_department',
      members: [v1.userId, v2.userId],
      data: { department: 'vision' },
    });
    expect(dept.json().summary).toEqual({ total: 2, successful: 2, failed: 0 });
    expect((await t.context.db.prisma.user.findUniqueOrThrow({ where: { id: v2.userId } })).department).toBe(
      'vision',
    );
    const suspend = await bulk({ operation: 'suspend', members: [v1.userId, v2.userId] });
    expect(suspend.json().results.map((r: { memberStatus: string }) => r.memberStatus)).toEqual([
      'suspended',
      'suspended',
    ]);
    expect((await call(t, { url: '/v2/auth/verify', key: v1 })).statusCode).toBe(401);
    const reactivate = await bulk({ operation: 'reactivate', members: [v1.userId, dev.userId] });
    expect(reactivate.json().results).toMatchObject([
      { userId: v1.userId, status: 'success', updated: true, memberStatus: 'active' },
      { userId: dev.userId, status: 'success', updated: false, memberStatus: 'active' },
    ]);
    expect((await call(t, { url: '/v2/auth/verify', key: v1 })).statusCode).toBe(200);
    expect((await bulk({ operation: 'suspend', members: [v1.userId] }, dev)).statusCode).toBe(403);
    const noRole = await bulk({ operation: 'update_role', members: [v1.userId] });
    expect(noRole.statusCode).toBe(400);
    expect(noRole.json().details.field).toBe('data.role');
  });

  it('reports team activity from recorded events', async () => {
    await t.context.db.prisma.user.update({
      where: { id: t.userId },
      data: { joinedAt: new Date(clock.now().getTime() - 30 * DAY) },
    });
    const newcomer = await addMember(t, { role: 'developer', department: 'sales' });
    await call(t, { url: '/v2/accounts/profile', key: dev });
    await call(t, { url: '/v2/accounts/profile', key: newcomer });
    await addResource(t, dev, 'ep_x', 'x');
    await call(t, {
      method: 'POST',
      url: '/v2/accounts/permissions/resources/ep_x/share',
      key: dev,
      payload: { users: [newcomer.userId], permissions: ['execute'] },
    });
    await t.context.accounts.resources.recordExecution(t.accountId, newcomer.userId, 'ep_x');
    const res = await call(t, { url: '/v2/accounts/team/activity?period=7d' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.period).toBe('7d');
    expect(body.summary).toMatchObject({ totalMembers: 4, activeMembers: 3, newMembers: 3 });
    const devActivity = body.memberActivity.find((m: { userId: string }) => m.userId === dev.userId);
    expect(devActivity).toMatchObject({
      role: 'developer',
      activity: { logins: 1, resourcesCreated: 1, collaborations: 1, endpointExecutions: 0 },
    });
    const newActivity = body.memberActivity.find((m: { userId: string }) => m.userId === newcomer.userId);
    expect(newActivity.activity).toEqual({
      logins: 1,
      endpointExecutions: 1,
      resourcesCreated: 0,
      collaborations: 1,
    });
    expect(body.teamCollaboration).toEqual({ sharedEndpoints: 1, crossTeamProjects: 1, knowledgeSharing: 2 });
    expect(body.summary.collaborationScore).toBe(50);
    expect(body.trends).toMatchObject({ activityGrowth: 100, memberEngagement: 75, retentionRate: 100 });
    const bad = await call(t, { url: '/v2/accounts/team/activity?period=12d' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ error: 'INVALID_PERIOD', details: { received: '12d' } });
  });
});

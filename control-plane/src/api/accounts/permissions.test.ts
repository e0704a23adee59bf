import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addMember, addResource, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

describe('roles and permissions', () => {
  let t: TestApp;
  let clock: ManualClock;
  let admin: TestMember;
  let dev: TestMember;
  let viewer: TestMember;

  beforeEach(async () => {
    clock = new ManualClock(new Date('2026-03-01T10:00:00Z'));
    t = await createTestApp({ clock });
    admin = await addMember(t, { role: 'admin', name: 'Ada Admin' });
    dev = await addMember(t, { role: 'developer', name: 'Dev One' });
    viewer = await addMember(t, { role: 'viewer', name: 'Vi Viewer' });
  });
  afterEach(async () => t.close());

  const effective = async (userId: string, key?: TestMember) =>
    call(t, { url: `/v2/accounts/permissions/${userId}`, ...(key ? { key } : {}) });
  const check = async (key: TestMember | undefined, body: Record<string, unknown>) =>
    call(t, {
      method: 'POST',
      url: '/v2/accounts/permissions/check',
      payload: body,
      ...(key ? { key } : {}),
    });

  it('describes the built-in roles, permissions and scopes', async () => {
    const res = await call(t, { url: '/v2/accounts/permissions/schema', key: viewer });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.roles.owner).toMatchObject({
      permissions: ['*'],
      scopes: ['*'],
      inherits: [],
      assignable: false,
    });
    expect(body.roles.admin).toMatchObject({
      permissions: ['read', 'write', 'execute', 'manage_team', 'manage_billing'],
      scopes: ['endpoints', 'clusters', 'accounts', 'billing'],
      inherits: ['developer'],
      assignable: true,
    });
    expect(body.roles.developer).toMatchObject({
      permissions: ['read', 'write', 'execute'],
      inherits: ['viewer'],
    });
    expect(body.roles.viewer).toMatchObject({ permissions: ['read'], scopes: ['endpoints', 'clusters'] });
    expect(Object.keys(body.permissions)).toEqual([
      'read',
      'write',
      'execute',
      'manage_team',
      'manage_billing',
      'manage_integrations',
      'manage_security',
    ]);
    expect(Object.keys(body.scopes)).toEqual([
      'endpoints',
      'clusters',
      'accounts',
      'billing',
      'integrations',
      'security',
    ]);
  });

  it('works out effective permissions with inheritance and resource access', async () => {
    const adminView = (await effective(admin.userId)).json();
    expect(adminView).toMatchObject({
      userId: admin.userId,
      role: 'admin',
      inheritedFrom: ['developer', 'viewer'],
      effectivePermissions: {
        permissions: ['read', 'write', 'execute', 'manage_team', 'manage_billing'],
        scopes: ['endpoints', 'clusters', 'accounts', 'billing'],
        limitations: { maxEndpoints: null, maxClusters: null, maxComputeHours: null, maxTeamMembers: null },
      },
      customPermissions: [],
    });
    expect(adminView.effectivePermissions.resourceAccess.clusters).toEqual({
      own: ['read', 'write', 'execute'],
      team: ['read', 'write', 'execute'],
      public: ['read'],
    });
    const devView = (await effective('me', dev)).json();
    expect(devView).toMatchObject({ userId: dev.userId, role: 'developer', inheritedFrom: ['viewer'] });
    expect(devView.effectivePermissions.resourceAccess.endpoints).toEqual({
      own: ['read', 'write', 'execute'],
      team: ['read', 'execute'],
      public: ['read'],
    });
    const viewerView = (await effective(viewer.userId, viewer)).json();
    expect(viewerView.effectivePermissions.permissions).toEqual(['read']);
    expect(viewerView.inheritedFrom).toEqual([]);
    const owner = (await effective('me')).json();
    expect(owner.effectivePermissions.permissions).toHaveLength(7);
    expect(owner.effectivePermissions.scopes).toHaveLength(6);
  });

  it("refuses a member reading another member's permissions, and audits the denial", async () => {
    const res = await effective(admin.userId, dev);
    expect(res.statusCode).toBe(403);
    expect(res.json()).toMatchObject({
      error: 'INSUFFICIENT_PERMISSIONS',
      code: 403,
      details: {
        requiredPermission: 'manage_team',
        requiredScope: 'accounts',
        currentRole: 'developer',
        requiredRole: 'admin',
      },
    });
    const audit = (await call(t, { url: '/v2/accounts/permissions/audit?type=access_denied' })).json();
    expect(audit.events[0]).toMatchObject({
      type: 'access_denied',
      action: 'read_permissions_attempt',
      actor: { userId: dev.userId, name: 'Dev One', ipAddress: '127.0.0.1' },
      details: { requiredPermission: 'manage_team', userRole: 'developer' },
    });
  });

  describe('custom roles', () => {
    const createRole = (body: Record<string, unknown>, key?: TestMember) =>
      call(t, {
        method: 'POST',
        url: '/v2/accounts/permissions/roles',
        payload: body,
        ...(key ? { key } : {}),
      });

    it('creates a role that members can hold, with inheritance, and lists it in the schema', async () => {
      const res = await createRole(
        {
          name: 'ml_engineer',
          displayName: 'ML engineer',
          description: 'Runs training',
          permissions: ['execute'],
          scopes: ['clusters'],
          inherits: ['viewer'],
          limitations: { maxClusters: 3, maxApiKeys: 5 },
        },
        admin,
      );
      expect(res.statusCode).toBe(201);
      const role = res.json().role;
      expect(role).toMatchObject({
        id: 'role_custom_ml_engineer',
        name: 'ml_engineer',
        displayName: 'ML engineer',
        permissions: ['execute'],
        scopes: ['clusters'],
        inherits: ['viewer'],
        assignable: true,
        builtIn: false,
        limitations: { maxClusters: 3, maxApiKeys: 5, maxEndpoints: null, maxComputeHours: null },
      });
      expect(role.createdAt).toBe(clock.now().toISOString());
      const schema = (await call(t, { url: '/v2/accounts/permissions/schema' })).json();
      expect(schema.roles.role_custom_ml_engineer.displayName).toBe('ML engineer');

      const member = await addMember(t, { role: 'role_custom_ml_engineer' });
      const view = (await effective('me', member)).json();
      expect(view.inheritedFrom).toEqual(['viewer']);
      expect(view.effectivePermissions.permissions).toEqual(['read', 'execute']);
      expect(view.effectivePermissions.scopes).toEqual(['endpoints', 'clusters']);
      expect(view.effectivePermissions.limitations).toMatchObject({ maxClusters: 3, maxApiKeys: 5 });
    });

    it('refuses a taken name with ROLE_NAME_EXISTS, built-in names included', async () => {
      const body = { name: 'ops', displayName: 'Ops', permissions: ['read'], scopes: ['clusters'] };
      expect((await createRole(body)).statusCode).toBe(201);
      const again = await createRole(body);
      expect(again.statusCode).toBe(409);
      expect(again.json()).toMatchObject({
        error: 'ROLE_NAME_EXISTS',
        details: { roleName: 'ops', existingRoleId: 'role_custom_ops' },
      });
      const builtIn = await createRole({ ...body, name: 'admin' });
      expect(builtIn.statusCode).toBe(409);
      expect(builtIn.json().details).toEqual({ roleName: 'admin', existingRoleId: 'admin' });
    });

    it('refuses hierarchies that inherit the owner, a stronger role, or form a cycle (422)', async () => {
      const owner = await createRole({
        name: 'boss',
        displayName: 'Boss',
        permissions: ['read'],
        scopes: ['clusters'],
        inherits: ['owner'],
      });
      expect(owner.statusCode).toBe(422);
      expect(owner.json()).toMatchObject({
        error: 'INVALID_ROLE_HIERARCHY',
        details: {
          parentRole: 'owner',
          childRole: 'role_custom_boss',
          reason: 'the owner role cannot be inherited',
        },
      });
      // The owner makes a security role; an admin may not build on it (it reaches beyond the admin).
      expect(
        (
          await createRole({
            name: 'secops',
            displayName: 'SecOps',
            permissions: ['read', 'manage_security'],
            scopes: ['security'],
          })
        ).statusCode,
      ).toBe(201);
      const stronger = await createRole(
        {
          name: 'helper',
          displayName: 'Helper',
          permissions: ['read'],
          scopes: ['clusters'],
          inherits: ['role_custom_secops'],
        },
        admin,
      );
      expect(stronger.statusCode).toBe(422);
      expect(stronger.json().details).toMatchObject({
        parentRole: 'role_custom_secops',
        childRole: 'role_custom_helper',
      });
      expect(stronger.json().details.reason).toMatch(/higher permissions than yours/);
      const unknown = await createRole({
        name: 'orphan',
        displayName: 'Orphan',
        permissions: ['read'],
        scopes: ['clusters'],
        inherits: ['role_custom_nope'],
      });
      expect(unknown.statusCode).toBe(422);
      // beta → alpha, then alpha → beta is a cycle.
      expect(
        (await createRole({ name: 'alpha', displayName: 'A', permissions: ['read'], scopes: ['clusters'] }))
          .statusCode,
      ).toBe(201);
      const beta = await createRole({
        name: 'beta',
        displayName: 'B',
        permissions: ['read'],
        scopes: ['clusters'],
        inherits: ['role_custom_alpha'],
      });
      expect(beta.statusCode).toBe(201);
      const cycle = await call(t, {
        method: 'PUT',
        url: '/v2/accounts/permissions/roles/role_custom_alpha',
        payload: { inherits: ['role_custom_beta'] },
      });
      expect(cycle.statusCode).toBe(422);
      expect(cycle.json().details.reason).toMatch(/cycle/);
    });

    it('refuses roles above the caller (403) and role management by non-managers', async () => {
      const above = await createRole(
        { name: 'sec', displayName: 'Sec', permissions: ['manage_security'], scopes: ['security'] },
        admin,
      );
      expect(above.statusCode).toBe(403);
      expect(above.json()).toMatchObject({
        error: 'INSUFFICIENT_PERMISSIONS',
        details: { attemptedPermission: 'manage_security', userRole: 'admin', requiredRole: 'owner' },
      });
      const byDev = await createRole(
        { name: 'x1', displayName: 'X', permissions: ['read'], scopes: ['clusters'] },
        dev,
      );
      expect(byDev.statusCode).toBe(403);
      expect(await t.context.db.prisma.customRole.count()).toBe(0);
    });

    it('applies role changes to its members at once, and deletes only unused roles', async () => {
      await createRole({ name: 'ops', displayName: 'Ops', permissions: ['read'], scopes: ['clusters'] });
      const member = await addMember(t, { role: 'role_custom_ops' });
      expect((await check(member, { permission: 'execute', scope: 'clusters' })).json().allowed).toBe(false);
      const updated = await call(t, {
        method: 'PUT',
        url: '/v2/accounts/permissions/roles/role_custom_ops',
        payload: { permissions: ['read', 'execute'], displayName: 'Operations' },
      });
      expect(updated.statusCode).toBe(200);
      expect(updated.json().role).toMatchObject({
        displayName: 'Operations',
        permissions: ['read', 'execute'],
      });
      expect((await check(member, { permission: 'execute', scope: 'clusters' })).json()).toMatchObject({
        allowed: true,
        source: 'role',
        role: 'role_custom_ops',
      });
      const inUse = await call(t, {
        method: 'DELETE',
        url: '/v2/accounts/permissions/roles/role_custom_ops',
      });
      expect(inUse.statusCode).toBe(409);
      expect(inUse.json()).toMatchObject({
        error: 'ROLE_IN_USE',
        details: { roleId: 'role_custom_ops', members: 1 },
      });
      await t.context.db.prisma.user.update({ where: { id: member.userId }, data: { role: 'viewer' } });
      const deleted = await call(t, {
        method: 'DELETE',
        url: '/v2/accounts/permissions/roles/role_custom_ops',
      });
      expect(deleted.json()).toEqual({ id: 'role_custom_ops', deleted: true });
      const builtIn = await call(t, {
        method: 'PUT',
        url: '/v2/accounts/permissions/roles/admin',
        payload: { displayName: 'x' },
      });
      expect(builtIn.statusCode).toBe(409);
      const missing = await call(t, {
        method: 'PUT',
        url: '/v2/accounts/permissions/roles/role_custom_zz',
        payload: { displayName: 'x' },
      });
      expect(missing.statusCode).toBe(404);
      expect(missing.json().error).toBe('ROLE_NOT_FOUND');
    });

    it('enforces maxApiKeys where keys are created and maxClusters where clusters are registered', async () => {
      await createRole({
        name: 'limited',
        displayName: 'Limited',
        permissions: ['read', 'write', 'execute'],
        scopes: ['clusters'],
        limitations: { maxApiKeys: 2, maxClusters: 1 },
      });
      const member = await addMember(t, { role: 'role_custom_limited' });
      const mint = () =>
        call(t, {
          method: 'POST',
          url: '/v2/auth/api-keys',
          key: member,
          payload: { name: 'k', permissions: ['read'], scopes: ['clusters'] },
        });
      expect((await mint()).statusCode).toBe(201);
      const third = await mint();
      expect(third.statusCode).toBe(403);
      expect(third.json()).toMatchObject({
        error: 'LIMIT_EXCEEDED',
        details: { limit: 'maxApiKeys', max: 2, current: 2, role: 'role_custom_limited' },
      });
      await addResource(t, member, 'cluster_one');
      await expect(addResource(t, member, 'cluster_two')).rejects.toMatchObject({
        code: 'LIMIT_EXCEEDED',
        details: { limit: 'maxClusters', max: 1, current: 1 },
      });
      expect(await t.context.db.prisma.resource.count({ where: { ownerId: member.userId } })).toBe(1);
    });
  });

  describe('grants', () => {
    const grant = (userId: string, body: Record<string, unknown>, key?: TestMember) =>
      call(t, {
        method: 'POST',
        url: `/v2/accounts/permissions/${userId}/grant`,
        payload: body,
        ...(key ? { key } : {}),
      });

    it('grants, expires and revokes; the member can act only while the grant is active', async () => {
      const auditPath = '/v2/accounts/permissions/audit';
      expect((await call(t, { url: auditPath, key: dev })).statusCode).toBe(403);
      const expiresAt = new Date(clock.now().getTime() + 3_600_000).toISOString();
      const res = await grant(
        dev.userId,
        {
          permissions: ['manage_team'],
          scopes: ['accounts'],
          expiresAt,
          reason: 'covering the on-call week',
        },
        admin,
      );
      expect(res.statusCode).toBe(201);
      const created = res.json().grant;
      expect(created).toMatchObject({
        userId: dev.userId,
        permissions: ['manage_team'],
        scopes: ['accounts'],
        resources: [],
        expiresAt,
        reason: 'covering the on-call week',
        grantedBy: admin.userId,
        grantedAt: clock.now().toISOString(),
        status: 'active',
        revokedBy: null,
      });
      expect(created.id).toMatch(/^grant_/);
      expect((await call(t, { url: auditPath, key: dev })).statusCode).toBe(200);
      const view = (await effective('me', dev)).json();
      expect(view.effectivePermissions.permissions).toContain('manage_team');
      expect(view.grants[0]).toMatchObject({ id: created.id, permissions: ['manage_team'] });
      expect((await check(dev, { permission: 'manage_team', scope: 'accounts' })).json()).toMatchObject({
        allowed: true,
        source: 'grant',
        details: { grantId: created.id },
      });

      clock.advance(3_600_001);
      expect((await call(t, { url: auditPath, key: dev })).statusCode).toBe(403);
      const listed = (await call(t, { url: `/v2/accounts/permissions/grants?userId=${dev.userId}` })).json();
      expect(listed.grants[0].status).toBe('expired');

      const second = (await grant(dev.userId, { permissions: ['manage_team'], scopes: ['accounts'] })).json()
        .grant;
      expect((await call(t, { url: auditPath, key: dev })).statusCode).toBe(200);
      const revoked = await call(t, {
        method: 'DELETE',
        url: `/v2/accounts/permissions/grants/${second.id}`,
        key: admin,
      });
      expect(revoked.statusCode).toBe(200);
      expect(revoked.json().grant).toMatchObject({
        id: second.id,
        status: 'revoked',
        revokedBy: admin.userId,
        revokedAt: clock.now().toISOString(),
      });
      expect((await call(t, { url: auditPath, key: dev })).statusCode).toBe(403);
      const again = await call(t, { method: 'DELETE', url: `/v2/accounts/permissions/grants/${second.id}` });
      expect(again.json().grant.status).toBe('revoked');
      const unknown = await call(t, { method: 'DELETE', url: '/v2/accounts/permissions/grants/grant_nope' });
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json()).toMatchObject({ error: 'GRANT_NOT_FOUND', details: { grantId: 'grant_nope' } });
    });

    it('never grants above the caller: 403 INSUFFICIENT_PERMISSIONS with what is missing', async () => {
      const res = await grant(dev.userId, { permissions: ['manage_security'], scopes: ['security'] }, admin);
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({
        error: 'INSUFFICIENT_PERMISSIONS',
        details: {
          attemptedPermission: 'manage_security',
          attemptedPermissions: ['security:manage_security'],
          userRole: 'admin',
          requiredRole: 'owner',
        },
      });
      const byDev = await grant(viewer.userId, { permissions: ['write'], scopes: ['clusters'] }, dev);
      expect(byDev.statusCode).toBe(403);
      expect(byDev.json().details.requiredPermission).toBe('manage_team');
      expect(await t.context.db.prisma.permissionGrant.count()).toBe(0);
    });

    it('limits a grant with resources to those resources', async () => {
      await addResource(t, dev, 'cluster_a');
      await addResource(t, dev, 'cluster_b');
      const res = await grant(viewer.userId, {
        permissions: ['write'],
        scopes: ['clusters'],
        resources: ['cluster_a'],
      });
      expect(res.statusCode).toBe(201);
      expect((await check(viewer, { permission: 'write', resourceId: 'cluster_a' })).json()).toMatchObject({
        allowed: true,
        source: 'grant',
        scope: 'clusters',
      });
      expect((await check(viewer, { permission: 'write', resourceId: 'cluster_b' })).json().allowed).toBe(
        false,
      );
      expect((await check(viewer, { permission: 'write', scope: 'clusters' })).json().allowed).toBe(false);
      const missing = await grant(viewer.userId, {
        permissions: ['read'],
        scopes: ['clusters'],
        resources: ['cluster_zz'],
      });
      expect(missing.statusCode).toBe(404);
      expect(missing.json().error).toBe('RESOURCE_NOT_FOUND');
    });
  });

  describe('resource shares', () => {
    const share = (resourceId: string, body: Record<string, unknown>, key?: TestMember) =>
      call(t, {
        method: 'POST',
        url: `/v2/accounts/permissions/resources/${resourceId}/share`,
        payload: body,
        ...(key ? { key } : {}),
      });

    it('lets a member act on a shared resource with the shared permissions, until revoked', async () => {
      const other = await addMember(t, { role: 'developer', name: 'Dev Two' });
      await addResource(t, dev, 'cluster_train', 'train');
      // A teammate's cluster: a developer may read and execute, not write.
      expect(
        (await check(other, { permission: 'execute', resourceId: 'cluster_train' })).json(),
      ).toMatchObject({
        allowed: true,
        source: 'role',
      });
      expect((await check(other, { permission: 'write', resourceId: 'cluster_train' })).json()).toMatchObject(
        {
          allowed: false,
          source: null,
        },
      );
      expect(
        (await check(viewer, { permission: 'execute', resourceId: 'cluster_train' })).json().allowed,
      ).toBe(false);
      const res = await share(
        'cluster_train',
        { users: [other.userId, viewer.userId], permissions: ['write', 'execute'], message: 'help me tune' },
        dev,
      );
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.resourceId).toBe('cluster_train');
      expect(body.shares).toHaveLength(2);
      expect(body.shares[0]).toMatchObject({
        permissions: ['write', 'execute'],
        status: 'active',
        sharedAt: clock.now().toISOString(),
      });
      expect(body.shares[0].id).toMatch(/^share_/);
      expect(typeof body.message).toBe('string');
      const allowed = (await check(other, { permission: 'write', resourceId: 'cluster_train' })).json();
      expect(allowed).toMatchObject({ allowed: true, source: 'share' });
      expect(
        (await check(viewer, { permission: 'execute', resourceId: 'cluster_train' })).json().source,
      ).toBe('share');

      const shareId = body.shares.find((s: { userId: string }) => s.userId === other.userId).id;
      const revoked = await call(t, {
        method: 'DELETE',
        url: `/v2/accounts/permissions/shares/${shareId}`,
        key: dev,
      });
      expect(revoked.json().share.status).toBe('revoked');
      expect((await check(other, { permission: 'write', resourceId: 'cluster_train' })).json().allowed).toBe(
        false,
      );
    });

    it('refuses sharing by a non-owner, above the giver, or with unknown people', async () => {
      await addResource(t, dev, 'ep_chat', 'chat');
      const byOther = await share('ep_chat', { users: [viewer.userId], permissions: ['read'] }, viewer);
      expect(byOther.statusCode).toBe(403);
      const tooMuch = await share('ep_chat', { users: [viewer.userId], permissions: ['manage_team'] }, dev);
      expect(tooMuch.statusCode).toBe(400);
      expect(tooMuch.json()).toMatchObject({
        error: 'INVALID_PERMISSION',
        details: { invalidPermissions: ['manage_team'], validPermissions: ['read', 'write', 'execute'] },
      });
      const nobody = await share('ep_chat', { users: ['usr_ghost'], permissions: ['read'] }, dev);
      expect(nobody.statusCode).toBe(404);
      expect(nobody.json()).toMatchObject({ error: 'MEMBER_NOT_FOUND', details: { userId: 'usr_ghost' } });
      const noResource = await share('ep_missing', { users: [viewer.userId], permissions: ['read'] }, dev);
      expect(noResource.statusCode).toBe(404);
      expect(await t.context.db.prisma.resourceShare.count()).toBe(0);
    });

    it('shares with every member of a department (teams)', async () => {
      const a = await addMember(t, { role: 'viewer', department: 'research' });
      const b = await addMember(t, { role: 'viewer', department: 'research' });
      await addMember(t, { role: 'viewer', department: 'sales' });
      await addResource(t, dev, 'ep_model', 'model');
      const res = await share('ep_model', { users: [], teams: ['research'], permissions: ['execute'] }, dev);
      expect(res.statusCode).toBe(200);
      expect(
        res
          .json()
          .shares.map((s: { userId: string }) => s.userId)
          .sort(),
      ).toEqual([a.userId, b.userId].sort());
      const empty = await share(
        'ep_model',
        { users: [], teams: ['nobody-here'], permissions: ['read'] },
        dev,
      );
      expect(empty.statusCode).toBe(400);
      expect(empty.json().details.field).toBe('teams');
    });
  });

  describe('check endpoint', () => {
    it('checks the caller by default and another member only for managers', async () => {
      const mine = (await check(dev, { permission: 'execute', scope: 'endpoints' })).json();
      expect(mine).toMatchObject({
        userId: dev.userId,
        permission: 'execute',
        scope: 'endpoints',
        resourceId: null,
        allowed: true,
        source: 'role',
        role: 'developer',
        details: { reason: expect.any(String), limitations: { maxClusters: null } },
      });
      const denied = (
        await check(admin, { userId: viewer.userId, permission: 'write', scope: 'clusters' })
      ).json();
      expect(denied).toMatchObject({ userId: viewer.userId, allowed: false, source: null, role: 'viewer' });
      expect(
        (await check(dev, { userId: viewer.userId, permission: 'read', scope: 'clusters' })).statusCode,
      ).toBe(403);
      const bad = await check(dev, { permission: 'fly', scope: 'clusters' });
      expect(bad.statusCode).toBe(400);
      expect(bad.json().error).toBe('INVALID_PERMISSION');
      const badScope = await check(dev, { permission: 'read', scope: 'moon' });
      expect(badScope.json().error).toBe('INVALID_SCOPE');
      const noScope = await check(dev, { permission: 'read' });
      expect(noScope.json().details.field).toBe('scope');
    });
  });

  describe('audit log', () => {
    it('records permission changes, role assignments and denials, with filters and a summary', async () => {
      await addResource(t, dev, 'cluster_x', 'x');
      await call(t, {
        method: 'POST',
        url: `/v2/accounts/permissions/${viewer.userId}/grant`,
        payload: { permissions: ['write'], scopes: ['clusters'] },
      });
      await call(t, {
        method: 'POST',
        url: '/v2/accounts/permissions/resources/cluster_x/share',
        key: dev,
        payload: { users: [viewer.userId], permissions: ['read'] },
      });
      await call(t, {
        method: 'PUT',
        url: `/v2/accounts/team/members/${viewer.userId}`,
        payload: { role: 'developer' },
      });
      await call(t, { url: `/v2/accounts/permissions/${admin.userId}`, key: viewer }); // denied

      const all = (await call(t, { url: '/v2/accounts/permissions/audit' })).json();
      expect(all.period).toBe('7d');
      expect(all.summary).toEqual({
        permissionChanges: 2,
        accessDenied: 1,
        roleAssignments: 1,
        resourceShares: 1,
      });
      expect(all.total).toBe(4);
      const roleChange = all.events.find((e: { action: string }) => e.action === 'role_updated');
      expect(roleChange).toMatchObject({
        type: 'role_assignment',
        actor: { userId: t.userId, name: 'Owner' },
        target: { userId: viewer.userId, name: 'Vi Viewer' },
        details: { oldRole: 'viewer', newRole: 'developer' },
      });
      expect(roleChange.id).toMatch(/^audit_/);
      expect(new Date(roleChange.timestamp).toISOString()).toBe(roleChange.timestamp);

      const byType = (await call(t, { url: '/v2/accounts/permissions/audit?type=permission_change' })).json();
      expect(byType.total).toBe(2);
      expect(byType.events.map((e: { action: string }) => e.action).sort()).toEqual([
        'permission_granted',
        'resource_shared',
      ]);
      const byResource = (
        await call(t, { url: '/v2/accounts/permissions/audit?resourceId=cluster_x' })
      ).json();
      expect(byResource.events).toHaveLength(1);
      expect(byResource.events[0].resource).toEqual({ type: 'cluster', id: 'cluster_x', name: 'x' });
      const byUser = (await call(t, { url: `/v2/accounts/permissions/audit?userId=${dev.userId}` })).json();
      expect(byUser.events.map((e: { action: string }) => e.action)).toEqual(['resource_shared']);

      clock.advance(2 * 86_400_000);
      expect((await call(t, { url: '/v2/accounts/permissions/audit?period=1d' })).json().total).toBe(0);
      expect((await call(t, { url: '/v2/accounts/permissions/audit?period=30d' })).json().total).toBe(4);
      const badPeriod = await call(t, { url: '/v2/accounts/permissions/audit?period=2w' });
      expect(badPeriod.statusCode).toBe(400);
      expect(badPeriod.json()).toMatchObject({
        error: 'INVALID_PERIOD',
        details: { validPeriods: ['1d', '7d', '30d', '90d'], received: '2w' },
      });
    });

    it('purges events older than the retention in settings', async () => {
      await call(t, { url: `/v2/accounts/permissions/${admin.userId}`, key: viewer });
      clock.advance(40 * 86_400_000);
      await call(t, { url: `/v2/accounts/permissions/${admin.userId}`, key: viewer });
      await t.context.db.prisma.accountSettings.create({
        data: {
          accountId: t.accountId,
          data: { security: { audit: { retention_days: 30 } } },
          updatedAt: clock.now(),
        },
      });
      expect(await t.context.accounts.audit.prune()).toBe(1);
      expect(await t.context.db.prisma.auditEvent.count()).toBe(1);
    });
  });
});

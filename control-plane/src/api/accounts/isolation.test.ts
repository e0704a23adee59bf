import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAccount, addMember, addResource, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

/**
 * Two accounts in one database. The second account's owner knows every id of the first (members, keys,
 * invitations, roles, grants, shares, resources) and tries to read and change them: each attempt answers
 * 404 (or 403), and nothing of the first account changes.
 */
describe('account isolation', () => {
  let t: TestApp;
  let clock: ManualClock;
  let intruder: TestMember;
  let dev: TestMember;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    clock = new ManualClock(new Date('2026-06-01T12:00:00Z'));
    t = await createTestApp({ clock, env: { ANVIL_SECRET_KEY: '1'.repeat(64) } });
    dev = await addMember(t, { role: 'developer', email: 'dev@acme.example' });
    intruder = await addAccount(t, 'Intruder');
    const owner = (body: Record<string, unknown>, method: 'POST' | 'PUT', url: string) =>
      call(t, { method, url, payload: body });
    ids['member'] = dev.userId;
    ids['owner'] = t.userId;
    ids['key'] = (await t.context.db.prisma.apiKey.findFirstOrThrow({ where: { userId: dev.userId } })).id;
    ids['invitation'] = (
      await owner({ email: 'new@acme.example', role: 'viewer' }, 'POST', '/v2/accounts/team/members/invite')
    ).json().invitation.id;
    ids['role'] = (
      await owner(
        { name: 'acme_ops', displayName: 'Ops', permissions: ['read'], scopes: ['clusters'] },
        'POST',
        '/v2/accounts/permissions/roles',
      )
    ).json().role.id;
    ids['grant'] = (
      await owner(
        { permissions: ['read'], scopes: ['accounts'] },
        'POST',
        `/v2/accounts/permissions/${dev.userId}/grant`,
      )
    ).json().grant.id;
    await addResource(t, null, 'cluster_acme', 'acme-train');
    ids['resource'] = 'cluster_acme';
    ids['share'] = (
      await owner(
        { users: [dev.userId], permissions: ['read'] },
        'POST',
        '/v2/accounts/permissions/resources/cluster_acme/share',
      )
    ).json().shares[0].id;
    await owner({ timezone: 'Europe/Berlin' }, 'PUT', '/v2/accounts/settings/billing');
    await owner(
      { webhook: { url: 'https://hooks.acme.example/x', secret: 'acme_webhook_secret' } },
      'PUT',
      '/v2/accounts/settings/notifications',
    );
  });
  afterAll(async () => t.close());

  async function snapshot(): Promise<string> {
    const p = t.context.db.prisma;
    const where = { accountId: t.accountId };
    const [users, keys, roles, grants, shares, resources, invitations, settings] = await Promise.all([
      p.user.findMany({ where, orderBy: { id: 'asc' } }),
      p.apiKey.findMany({ where, orderBy: { id: 'asc' } }),
      p.customRole.findMany({ where, orderBy: { id: 'asc' } }),
      p.permissionGrant.findMany({ where, orderBy: { id: 'asc' } }),
      p.resourceShare.findMany({ where, orderBy: { id: 'asc' } }),
      p.resource.findMany({ where, orderBy: { id: 'asc' } }),
      p.invitation.findMany({ where, orderBy: { id: 'asc' } }),
      p.accountSettings.findMany({ where }),
    ]);
    return JSON.stringify({
      users,
      keys: keys.map(({ lastUsedAt: _, ...k }) => k),
      roles,
      grants,
      shares,
      resources,
      invitations,
      settings,
    });
  }

  const attempts: {
    name: string;
    method: 'GET' | 'POST' | 'PUT' | 'DELETE';
    url: string;
    payload?: unknown;
    status: number;
    code: string;
  }[] = [
    {
      name: 'read a member',
      method: 'GET',
      url: '/v2/accounts/team/members/{member}',
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'read a pending member',
      method: 'GET',
      url: '/v2/accounts/team/members/{invitation}',
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'change a member',
      method: 'PUT',
      url: '/v2/accounts/team/members/{member}',
      payload: { role: 'viewer', status: 'suspended' },
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'remove a member',
      method: 'DELETE',
      url: '/v2/accounts/team/members/{member}',
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'remove the owner',
      method: 'DELETE',
      url: '/v2/accounts/team/members/{owner}',
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'read permissions of a member',
      method: 'GET',
      url: '/v2/accounts/permissions/{member}',
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'check a member',
      method: 'POST',
      url: '/v2/accounts/permissions/check',
      payload: { userId: '{member}', permission: 'read', scope: 'clusters' },
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'grant to a member',
      method: 'POST',
      url: '/v2/accounts/permissions/{member}/grant',
      payload: { permissions: ['read'], scopes: ['clusters'] },
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'revoke a grant',
      method: 'DELETE',
      url: '/v2/accounts/permissions/grants/{grant}',
      status: 404,
      code: 'GRANT_NOT_FOUND',
    },
    {
      name: 'read a role',
      method: 'GET',
      url: '/v2/accounts/permissions/roles/{role}',
      status: 404,
      code: 'ROLE_NOT_FOUND',
    },
    {
      name: 'change a role',
      method: 'PUT',
      url: '/v2/accounts/permissions/roles/{role}',
      payload: { permissions: ['read', 'write'] },
      status: 404,
      code: 'ROLE_NOT_FOUND',
    },
    {
      name: 'delete a role',
      method: 'DELETE',
      url: '/v2/accounts/permissions/roles/{role}',
      status: 404,
      code: 'ROLE_NOT_FOUND',
    },
    {
      name: 'share a resource',
      method: 'POST',
      url: '/v2/accounts/permissions/resources/{resource}/share',
      payload: { users: [], permissions: ['read'] },
      status: 404,
      code: 'RESOURCE_NOT_FOUND',
    },
    {
      name: 'list shares of a resource',
      method: 'GET',
      url: '/v2/accounts/permissions/resources/{resource}/shares',
      status: 404,
      code: 'RESOURCE_NOT_FOUND',
    },
    {
      name: 'revoke a share',
      method: 'DELETE',
      url: '/v2/accounts/permissions/shares/{share}',
      status: 404,
      code: 'SHARE_NOT_FOUND',
    },
    {
      name: 'check a resource',
      method: 'POST',
      url: '/v2/accounts/permissions/check',
      payload: { permission: 'read', resourceId: '{resource}' },
      status: 404,
      code: 'RESOURCE_NOT_FOUND',
    },
    {
      name: 'resend an invitation',
      method: 'POST',
      url: '/v2/accounts/team/invitations/{invitation}/resend',
      status: 404,
      code: 'INVITATION_NOT_FOUND',
    },
    {
      name: 'cancel an invitation',
      method: 'DELETE',
      url: '/v2/accounts/team/invitations/{invitation}',
      status: 404,
      code: 'INVITATION_NOT_FOUND',
    },
    {
      name: 'revoke a key',
      method: 'DELETE',
      url: '/v2/auth/api-keys/{key}',
      status: 404,
      code: 'API_KEY_NOT_FOUND',
    },
    {
      name: 'rotate a key',
      method: 'POST',
      url: '/v2/auth/api-keys/{key}/rotate',
      status: 404,
      code: 'API_KEY_NOT_FOUND',
    },
    {
      name: 'share with a member',
      method: 'POST',
      url: '/v2/accounts/permissions/resources/cluster_intruder/share',
      payload: { users: ['{member}'], permissions: ['read'] },
      status: 404,
      code: 'MEMBER_NOT_FOUND',
    },
    {
      name: 'grant with a resource',
      method: 'POST',
      url: '/v2/accounts/permissions/{self}/grant',
      payload: { permissions: ['read'], scopes: ['clusters'], resources: ['{resource}'] },
      status: 404,
      code: 'RESOURCE_NOT_FOUND',
    },
    {
      name: 'bulk-suspend members',
      method: 'POST',
      url: '/v2/accounts/team/members/bulk',
      payload: { operation: 'suspend', members: ['{member}', '{owner}'] },
      status: 200,
      code: '',
    },
  ];

  it.each(attempts)('the other account cannot $name ($status)', async (attempt) => {
    if (!(await t.context.db.prisma.resource.findUnique({ where: { id: 'cluster_intruder' } }))) {
      await addResource(t, intruder, 'cluster_intruder', 'theirs');
    }
    clock.advance(3_600_000);
    const fill = (text: string) =>
      text.replace(/\{(\w+)\}/g, (_m, name: string) =>
        name === 'self' ? intruder.userId : (ids[name] ?? name),
      );
    const before = await snapshot();
    const res = await call(t, {
      method: attempt.method,
      url: fill(attempt.url),
      key: intruder,
      ...(attempt.payload ? { payload: JSON.parse(fill(JSON.stringify(attempt.payload))) } : {}),
    });
    expect(res.statusCode, res.body).toBe(attempt.status);
    if (attempt.status === 200) {
      // Bulk answers per member: each one of the other account is "not found".
      expect(res.json().summary).toEqual({ total: 2, successful: 0, failed: 2 });
      expect(
        res.json().results.every((r: { error: { code: string } }) => r.error.code === 'MEMBER_NOT_FOUND'),
      ).toBe(true);
    } else {
      expect(res.json().error).toBe(attempt.code);
    }
    expect(await snapshot()).toBe(before);
  });

  it('shows the other account nothing of this one in its listings', async () => {
    const team = (await call(t, { url: '/v2/accounts/team/members', key: intruder })).json();
    expect(team.members.map((m: { id: string }) => m.id)).toEqual([intruder.userId]);
    expect(team.roles).toMatchObject({ owner: 1, developer: 0, pending: 0 });
    const invitations = (await call(t, { url: '/v2/accounts/team/invitations', key: intruder })).json();
    expect(invitations.invitations).toEqual([]);
    const schema = (await call(t, { url: '/v2/accounts/permissions/schema', key: intruder })).json();
    expect(Object.keys(schema.roles)).toEqual(['owner', 'admin', 'developer', 'viewer']);
    const grants = (await call(t, { url: '/v2/accounts/permissions/grants', key: intruder })).json();
    expect(grants.grants).toEqual([]);
    const keys = (await call(t, { url: '/v2/auth/api-keys', key: intruder })).json();
    expect(keys.api_keys.every((k: { userId: string }) => k.userId === intruder.userId)).toBe(true);
    const audit = (await call(t, { url: '/v2/accounts/permissions/audit?period=90d', key: intruder })).json();
    expect(audit.events.every((e: { actor: { userId: string } }) => e.actor.userId === intruder.userId)).toBe(
      true,
    );
    const settings = (await call(t, { url: '/v2/accounts/settings', key: intruder })).json();
    expect(settings.settings.billing.timezone).toBe('UTC');
    expect(settings.settings.notifications.webhook.url).toBeNull();
    const exported = (
      await call(t, { url: '/v2/accounts/settings/export?include_secrets=true', key: intruder })
    ).json();
    expect(JSON.stringify(exported)).not.toContain('acme_webhook_secret');
    const activity = (await call(t, { url: '/v2/accounts/team/activity', key: intruder })).json();
    expect(activity.memberActivity.map((m: { userId: string }) => m.userId)).toEqual([intruder.userId]);
  });

  it("keeps each account's settings apart when the other changes or imports its own", async () => {
    const before = await snapshot();
    await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/billing',
      key: intruder,
      payload: { timezone: 'Asia/Tokyo' },
    });
    await call(t, {
      method: 'POST',
      url: '/v2/accounts/settings/import',
      key: intruder,
      payload: { settings: { preferences: { default_region: 'eu-west-1' } }, merge_strategy: 'overwrite' },
    });
    expect(await snapshot()).toBe(before);
    const mine = (await call(t, { url: '/v2/accounts/settings' })).json();
    expect(mine.settings.billing.timezone).toBe('Europe/Berlin');
    expect(mine.settings.preferences.default_region).toBeNull();
    // And this account's member still works, unaffected by the other account.
    expect((await call(t, { url: '/v2/auth/verify', key: dev })).statusCode).toBe(200);
  });
});

import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addAccount, addMember, call } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

describe('operators manage accounts: /v2/admin/accounts', () => {
  let t: TestApp;

  beforeEach(async () => {
    t = await createTestApp();
  });
  afterEach(async () => {
    await t.close();
  });

  /** Creates an account through the API and accepts its owner invitation; the owner's first key. */
  async function tenant(name: string, tier?: string) {
    const created = await call(t, {
      method: 'POST',
      url: '/v2/admin/accounts',
      payload: { name, ownerEmail: `owner@${name.toLowerCase()}.example`, ...(tier ? { tier } : {}) },
    });
    expect(created.statusCode, created.body).toBe(201);
    const body = created.json();
    const token = new URL(body.inviteUrl).pathname.split('/').pop()!;
    const accepted = await t.app.inject({
      method: 'POST',
      url: `/v2/accounts/team/invitations/${token}/accept`,
      payload: { name: `${name} owner` },
    });
    expect(accepted.statusCode, accepted.body).toBe(201);
    return {
      account: body.account,
      invitation: body.invitation,
      ownerKey: accepted.json().apiKey.value as string,
    };
  }

  it('creates an account whose invited owner accepts, gets a key and sees only their own team', async () => {
    const created = await call(t, {
      method: 'POST',
      url: '/v2/admin/accounts',
      payload: { name: 'Acme Labs', tier: 'pro', ownerEmail: 'ceo@acme.example', expiresIn: '1d' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const body = created.json();
    expect(body.account).toMatchObject({
      name: 'Acme Labs',
      tier: 'pro',
      operator: false,
      members: { active: 0, suspended: 0 },
      pendingInvitations: 1,
      clusters: { active: 0, gpusHeld: 0 },
    });
    expect(body.invitation).toMatchObject({ email: 'ceo@acme.example', role: 'owner', status: 'sent' });
    expect(body.emailDelivery).toBe('not_configured');
    const token = new URL(body.inviteUrl).pathname.split('/').pop()!;
    const accepted = await t.app.inject({
      method: 'POST',
      url: `/v2/accounts/team/invitations/${token}/accept`,
      payload: {},
    });
    expect(accepted.statusCode, accepted.body).toBe(201);
    expect(accepted.json().member).toMatchObject({ role: 'owner', email: 'ceo@acme.example' });
    const ownerKey = accepted.json().apiKey.value as string;

    const team = (await call(t, { url: '/v2/accounts/team/members', key: ownerKey })).json();
    expect(team.members.map((m: { email: string }) => m.email)).toEqual(['ceo@acme.example']);
    // A tenant's owner is no operator.
    expect((await call(t, { url: '/v2/admin/accounts', key: ownerKey })).statusCode).toBe(403);

    const listed = (await call(t, { url: '/v2/admin/accounts?search=acme' })).json();
    expect(listed.accounts).toHaveLength(1);
    expect(listed.accounts[0]).toMatchObject({ members: { active: 1 }, pendingInvitations: 0 });
  });

  it('changes a tier and the tenant keys get the new limits at once', async () => {
    const acme = await tenant('Acme');
    const before = (await call(t, { url: '/v2/auth/rate-limits', key: acme.ownerKey })).json();
    expect(before.tier).toBe('free');
    expect(before.limits.read_operations.limit).toBe(100);
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/v2/admin/accounts/${acme.account.id}`,
      headers: t.auth(),
      payload: { tier: 'enterprise', name: 'Acme Corp' },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json().account).toMatchObject({ name: 'Acme Corp', tier: 'enterprise' });
    const after = (await call(t, { url: '/v2/auth/rate-limits', key: acme.ownerKey })).json();
    expect(after.tier).toBe('enterprise');
    expect(after.limits.read_operations.limit).toBe(10_000);
  });

  it('lists accounts newest first with filters and paging', async () => {
    await tenant('Alpha', 'pro');
    await tenant('Beta');
    const all = (await call(t, { url: '/v2/admin/accounts' })).json();
    expect(all.accounts.map((a: { name: string }) => a.name)).toEqual(['Beta', 'Alpha', 'Default']);
    expect(all.accounts[2]).toMatchObject({ operator: true, members: { active: 1 } });
    const pro = (await call(t, { url: '/v2/admin/accounts?tier=pro' })).json();
    expect(pro.accounts.map((a: { name: string }) => a.name)).toEqual(['Alpha']);
    const page = (await call(t, { url: '/v2/admin/accounts?limit=1&offset=1' })).json();
    expect(page.accounts.map((a: { name: string }) => a.name)).toEqual(['Alpha']);
    expect(page.pagination).toEqual({ total: 3, limit: 1, offset: 1, hasMore: true });
  });

  it("refuses bad input with the spec's errors and leaves no account behind", async () => {
    const count = () => t.context.db.prisma.account.count();
    const before = await count();
    const cases: [Record<string, unknown>, string][] = [
      [{ name: 'No owner' }, 'VALIDATION_ERROR'],
      // The owner's address is checked as team invitations check it.
      [{ name: 'Bad email', ownerEmail: 'not-an-email' }, 'INVALID_EMAIL'],
      [{ name: 'Bad tier', ownerEmail: 'a@b.example', tier: 'gold' }, 'VALIDATION_ERROR'],
      [{ name: '', ownerEmail: 'a@b.example' }, 'VALIDATION_ERROR'],
      [{ name: 'Extra', ownerEmail: 'a@b.example', operator: true }, 'VALIDATION_ERROR'],
      [{ name: 'Lifetime', ownerEmail: 'a@b.example', expiresIn: '2y' }, 'VALIDATION_ERROR'],
    ];
    for (const [payload, code] of cases) {
      const res = await call(t, { method: 'POST', url: '/v2/admin/accounts', payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error).toBe(code);
    }
    expect(await count()).toBe(before);
    const empty = await t.app.inject({
      method: 'PATCH',
      url: `/v2/admin/accounts/${t.accountId}`,
      headers: t.auth(),
      payload: {},
    });
    expect(empty.statusCode).toBe(400);
    const missing = await t.app.inject({
      method: 'PATCH',
      url: '/v2/admin/accounts/acc_nope',
      headers: t.auth(),
      payload: { tier: 'pro' },
    });
    expect(missing.statusCode).toBe(404);
  });

  it("is for operators only: a customer's owner and an operator-account developer get 403", async () => {
    const customer = await addAccount(t, 'Customer');
    const developer = await addMember(t, { role: 'developer' });
    for (const key of [customer, developer]) {
      expect((await call(t, { url: '/v2/admin/accounts', key })).statusCode).toBe(403);
      const created = await call(t, {
        method: 'POST',
        url: '/v2/admin/accounts',
        key,
        payload: { name: 'Sneaky', ownerEmail: 'x@y.example' },
      });
      expect(created.statusCode).toBe(403);
    }
    expect(await t.context.db.prisma.account.count({ where: { name: 'Sneaky' } })).toBe(0);
  });
});

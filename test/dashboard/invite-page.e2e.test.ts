import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../control-plane/src/testing/app.ts';
import { browserOrFail, launchChromium } from './browser.ts';

const canRun = browserOrFail('invitation page tests');

/**
 * The page behind inviteUrl, in a real Chromium against the real control plane over HTTP: it shows the
 * invitation, accepts it with a form post (no script runs on the page), and shows the first API key once.
 */
describe.skipIf(!canRun)('invitation page', () => {
  let t: TestApp;
  let browser: Browser;
  let base = '';
  const pageErrors: string[] = [];

  beforeAll(async () => {
    t = await createTestApp();
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const address = t.app.server.address();
    if (!address || typeof address === 'string') throw new Error('no address');
    base = `http://127.0.0.1:${address.port}`;
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  async function invite(email: string, extra: Record<string, unknown> = {}): Promise<string> {
    const res = await fetch(`${base}/v2/accounts/team/members`, {
      method: 'POST',
      headers: { ...t.auth(), 'content-type': 'application/json' },
      body: JSON.stringify({ email, role: 'developer', ...extra }),
    });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { inviteUrl: string };
    const token = new URL(body.inviteUrl).pathname.split('/').pop();
    return `${base}/invite/${token}`;
  }

  async function open(url: string): Promise<Page> {
    const page = await browser.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('console', (message) => {
      // A refusal's status is logged as a failed load: only policy violations count here.
      if (message.type() === 'error' && /Content Security Policy/i.test(message.text())) {
        pageErrors.push(message.text());
      }
    });
    await page.goto(url);
    return page;
  }

  async function pendingStatus(email: string): Promise<string | undefined> {
    const row = await t.database.db.prisma.invitation.findFirst({ where: { email } });
    return row?.status;
  }

  it('shows the account, the role and the invitee, under a policy that runs no script, and changes nothing', async () => {
    const url = await invite('ada@example.com');
    const response = await fetch(url);
    expect(response.status).toBe(200);
    const csp = response.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("form-action 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toMatch(/script-src|unsafe-inline/);
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.headers.get('referrer-policy')).toBe('no-referrer');

    const page = await open(url);
    const text = await page.textContent('[data-invitation]');
    expect(text).toContain('ada@example.com');
    expect(text).toContain('developer');
    const account = await t.database.db.prisma.account.findUniqueOrThrow({ where: { id: t.accountId } });
    expect(text).toContain(account.name);
    expect(await page.locator('script').count()).toBe(0);
    await page.close();
    // Viewing (as a mail scanner would) accepts nothing.
    expect(await pendingStatus('ada@example.com')).toBe('sent');
  });

  it('accepts with the form, shows a working key once, and a second post is refused', async () => {
    const url = await invite('grace@example.com');
    const page = await open(url);
    await page.fill('input[name="name"]', 'Grace Hopper');
    await page.fill('input[name="username"]', 'grace');
    await page.click('button[type="submit"]');
    await page.waitForSelector('[data-api-key]');
    const key = (await page.textContent('[data-api-key]'))?.trim() ?? '';
    expect(key).toMatch(/^anv_/);

    const verify = await fetch(`${base}/v2/auth/verify`, { headers: { authorization: `Bearer ${key}` } });
    expect(verify.status).toBe(200);
    const member = await t.database.db.prisma.user.findFirstOrThrow({
      where: { email: 'grace@example.com' },
    });
    expect(member).toMatchObject({
      status: 'active',
      role: 'developer',
      name: 'Grace Hopper',
      username: 'grace',
    });

    // Reloading the result page posts again: the invitation is no longer pending and no second key is made.
    const again = await page.reload();
    expect(again?.status()).toBe(409);
    expect(await page.textContent('[role="alert"]')).toContain('accepted');
    expect(await page.locator('[data-api-key]').count()).toBe(0);
    const keys = await t.database.db.prisma.apiKey.count({ where: { userId: member.id } });
    expect(keys).toBe(1);
    await page.close();
    expect(pageErrors).toEqual([]);
  });

  it('shows markup in the inviter’s message as text, never as page content', async () => {
    const url = await invite('eve@example.com', {
      message: '<script>window.pwned=1</script><img src=x onerror="window.pwned=1"><b>bold</b>',
    });
    const page = await open(url);
    expect(await page.locator('script, img, blockquote b').count()).toBe(0);
    expect(await page.textContent('blockquote')).toContain('<script>window.pwned=1</script>');
    expect(await page.evaluate('window.pwned')).toBeUndefined();
    await page.close();
  });

  it('re-renders the form with the reason for a bad username, and accepts nothing', async () => {
    const url = await invite('bad@example.com');
    const page = await open(url);
    await page.fill('input[name="username"]', '-x');
    const [response] = await Promise.all([page.waitForNavigation(), page.click('button[type="submit"]')]);
    expect(response?.status()).toBe(400);
    expect(await page.textContent('[role="alert"]')).toContain('3 to 39 characters');
    expect(await page.inputValue('input[name="username"]')).toBe('-x');
    await page.close();
    expect(await pendingStatus('bad@example.com')).toBe('sent');
  });

  it.each([
    ['an unknown token', `/invite/${'A'.repeat(43)}`, 404],
    ['a malformed token', '/invite/not..a~token', 404],
  ])('answers a refusal page for %s', async (_what, path, status) => {
    const response = await fetch(`${base}${path}`);
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await response.text()).toContain('cannot be accepted');
  });

  it('refuses an expired or cancelled invitation with the reason', async () => {
    const expiredUrl = await invite('old@example.com');
    await t.database.db.prisma.invitation.updateMany({
      where: { email: 'old@example.com' },
      data: { expiresAt: new Date(Date.now() - 1000) },
    });
    const expired = await fetch(expiredUrl);
    expect(expired.status).toBe(410);
    expect(await expired.text()).toContain('expired');

    const cancelledUrl = await invite('gone@example.com');
    await t.database.db.prisma.invitation.updateMany({
      where: { email: 'gone@example.com' },
      data: { status: 'cancelled' },
    });
    const cancelled = await fetch(cancelledUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'name=x',
    });
    expect(cancelled.status).toBe(409);
    expect(await cancelled.text()).toContain('cancelled');
  });
});

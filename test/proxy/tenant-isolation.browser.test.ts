import type { Browser, BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserOrFail, launchChromium } from '../dashboard/browser.ts';
import { PROXY_DOMAIN, type Tenant, TenantWorld } from './tenant-world.ts';

/**
 * Two tenants' ports in one real Chromium (issue 15, point 2). Sibling `cluster-*.<domain>` hosts are
 * one site to a browser, so SameSite does not keep a page on tenant A from sending the victim's
 * tenant-B cookie; the proxy must. A is a public port (anyone's page), B an authenticated one the
 * victim is signed in to.
 */
describe.skipIf(!browserOrFail('proxy tenant isolation'))('HTTPS proxy: two tenants in Chromium', () => {
  let world: TenantWorld;
  let browser: Browser;
  let context: BrowserContext;
  let a: Tenant;
  let b: Tenant;

  /** A page that POSTs to `target` with the browser's cookies (as a hostile page would), then says so. */
  const poster = (target: string) => `<!doctype html><title>posting</title><script>
    fetch(${JSON.stringify(target)}, { method: 'POST', credentials: 'include', mode: 'no-cors', body: 'x=1' })
      .then(() => { document.title = 'sent'; }, () => { document.title = 'sent'; });
  </script>`;

  const postsSeen = (tenant: Tenant) =>
    tenant.app.seen.filter((s) => s.method === 'POST' && s.url === '/echo');

  beforeAll(async () => {
    world = await TenantWorld.start();
    a = await world.tenant('tenant-a', { public_access: true });
    b = await world.tenant('tenant-b');
    // Every name under the proxy domain is this loopback proxy; the development CA is not installed.
    browser = await launchChromium([`--host-resolver-rules=MAP *.${PROXY_DOMAIN} 127.0.0.1`]);
    context = await browser.newContext({ ignoreHTTPSErrors: true });
    // The victim signs in to tenant B through a login link.
    const link = await world.loginPath(b);
    const page = await context.newPage();
    const landed = await page.goto(`${b.origin}${link.path}&next=/echo`);
    expect(landed?.status()).toBe(200);
    await page.close();
  });

  afterAll(async () => {
    await browser?.close();
    await world?.close();
  });

  it("lets B's own page write to B (the cookie works), but not a page on tenant A", async () => {
    b.app.html = poster(`${b.origin}/echo`);
    const own = await context.newPage();
    await own.goto(`${b.origin}/page`);
    await own.waitForFunction("document.title === 'sent'");
    await own.close();
    const fromB = postsSeen(b);
    expect(fromB).toHaveLength(1);
    expect(fromB[0]!.headers.origin).toBe(b.origin);

    a.app.html = poster(`${b.origin}/echo`);
    const hostile = await context.newPage();
    await hostile.goto(`${a.origin}/page`);
    await hostile.waitForFunction("document.title === 'sent'");
    await hostile.close();
    // The proxy refused it: B's application never saw a second POST.
    expect(postsSeen(b)).toHaveLength(1);
  });

  it("keeps a cookie that A's container scopes to the whole proxy domain on A's host", async () => {
    const page = await context.newPage();
    await page.goto(`${a.origin}/plant`);
    const planted = (await context.cookies()).filter((c) => c.name === 'planted' || c.name === 'also');
    expect(planted.map((c) => [c.name, c.domain])).toEqual([
      ['planted', a.host],
      ['also', a.host],
    ]);
    const echo = await page.goto(`${b.origin}/echo`);
    const seen = (await echo!.json()) as { cookie: string | null };
    await page.close();
    expect(seen.cookie).toBeNull();
    // (Chromium also asks for /favicon.ico.)
    const arrived = b.app.seen.filter((s) => s.url === '/echo').at(-1)!;
    expect(String(arrived.headers.cookie ?? '')).not.toMatch(/planted|also/);
  });
});

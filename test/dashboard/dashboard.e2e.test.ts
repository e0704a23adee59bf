import { newId } from '@anvil/shared';
import type Dockerode from 'dockerode';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { clusterRow } from '../../control-plane/src/testing/cluster-row.ts';
import { ensureBusyboxImage } from '../fixtures/images/busybox.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import { type AgentProcess, spawnAgent } from '../fleet/agent-process.ts';
import { FleetControlPlane } from '../fleet/control-plane.ts';
import { busyboxSpec, createWorkload, removeRunContainers, runLabel } from '../fleet/fixtures.ts';
import { waitFor } from '../fleet/wait.ts';
import { browserOrFail, launchChromium } from './browser.ts';

vi.setConfig({ testTimeout: 300_000, hookTimeout: 400_000 });

const canRun = dockerOrFail('dashboard tests') && browserOrFail('dashboard tests');

// page.evaluate takes expressions as strings here: this file is type-checked without the DOM's types.

/**
 * The operators' dashboard in a real Chromium against the real control plane, with a real agent
 * (simulated GPUs: this machine has none) running a real container: what the pages show comes from
 * the admin API, and what their buttons do lands in the database.
 */
describe.skipIf(!canRun)('operators dashboard', () => {
  const run = runLabel();
  let docker: Dockerode;
  let cp: FleetControlPlane;
  let agent: AgentProcess;
  let browser: Browser;
  let hostId = '';
  let workloadId = '';
  const pageErrors: string[] = [];

  beforeAll(async () => {
    docker = testDocker();
    await ensureBusyboxImage(docker);
    cp = await FleetControlPlane.start();
    agent = await spawnAgent({ controlPlaneUrl: cp.url, joinToken: await cp.joinToken() });
    hostId = await agent.hostId();
    await cp.readyHost(hostId, undefined, agent);
    workloadId = await createWorkload(
      cp,
      hostId,
      busyboxSpec(run, { script: 'echo "dashboard line <b>one</b>"; sleep 3600' }),
    );
    browser = await launchChromium();
  }, 400_000);

  afterAll(async () => {
    await browser?.close();
    await agent?.kill('SIGKILL');
    await cp?.close();
    if (docker) await removeRunContainers(docker, run.filter);
  });

  async function openPage(): Promise<Page> {
    const page = await browser.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(`${cp.url}/dashboard`);
    return page;
  }

  async function signIn(key: string): Promise<Page> {
    const page = await openPage();
    await page.fill('[data-form="sign-in"] input[name="key"]', key);
    await page.click('[data-form="sign-in"] button[type="submit"]');
    return page;
  }

  it('serves one page, its script and style, under a strict content security policy', async () => {
    const page = await fetch(`${cp.url}/dashboard`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    const html = await page.text();
    // No inline script: the only script is the bundle, named by its hash.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/);
    const src = /src="(\/dashboard\/app\.js\?v=[\w-]+)"/.exec(html)?.[1];
    expect(src).toBeDefined();
    const script = await fetch(`${cp.url}${src}`);
    expect(script.status).toBe(200);
    expect(script.headers.get('cache-control')).toContain('immutable');
    const etag = script.headers.get('etag') ?? '';
    const again = await fetch(`${cp.url}${src}`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
  });

  it('refuses malformed keys and keys outside the operators account, saying why', async () => {
    const page = await signIn('anv_live_not-a-real-key');
    await expect.poll(() => page.textContent('[data-form="sign-in"] .error')).toMatch(/malformed API key/);
    await page.close();

    // A valid key, but of a viewer: the admin API's 403 is what the page shows.
    const viewer = await cp.member('viewer');
    const refused = await signIn(viewer);
    await expect.poll(() => refused.textContent('[data-form="sign-in"] .error')).toMatch(/operators only/);
    expect(await refused.evaluate('sessionStorage.length')).toBe(0);
    await refused.close();
  });

  it('shows the fleet as the agent reports it, and cordons and uncordons from a row', async () => {
    const page = await signIn(cp.ownerKey);
    const row = page.locator(`[data-host="${hostId}"]`);
    await row.waitFor();
    await expect.poll(() => row.locator('[data-status]').getAttribute('data-status')).toBe('ready');
    const host = await cp.host(hostId);
    expect(await row.textContent()).toContain(`${host.gpus.count} × ${host.gpus.models.join(', ')}`);
    expect(await page.textContent('[data-tile="ready"] strong')).toBe('1 / 1');

    await row.locator('[data-action="cordon"]').click();
    await waitFor('host cordoned through the dashboard', async () => (await cp.host(hostId)).cordoned);
    await expect.poll(() => row.locator('[data-status]').getAttribute('data-status')).toBe('cordoned');
    expect(await page.textContent('[data-status-line]')).toContain('cordoned');

    await row.locator('[data-action="uncordon"]').click();
    await waitFor('host uncordoned through the dashboard', async () => !(await cp.host(hostId)).cordoned);
    await expect.poll(() => row.locator('[data-status]').getAttribute('data-status')).toBe('ready');
    await page.close();
  });

  it("shows a host's GPUs and workloads, and follows a workload's logs as text", async () => {
    await waitFor(
      'the workload runs on the agent',
      async () => (await cp.workload(workloadId)).phase === 'running',
    );
    const page = await signIn(cp.ownerKey);
    await page.locator(`[data-host="${hostId}"] a`).click();
    await page.locator('[data-view="host"] [data-table="gpus"]').waitFor();
    const host = await cp.host(hostId);
    expect(await page.locator('[data-table="gpus"] tbody tr').count()).toBe(host.gpus.count);
    // Current readings come from the agent's latest host sample.
    await expect
      .poll(() => page.locator('[data-view="host"] dl').textContent(), { timeout: 60_000 })
      .toMatch(/[\d.]+ [KMGT]iB used of/);
    const workloadRow = page.locator(`[data-workload="${workloadId}"]`);
    await workloadRow.waitFor();
    expect(await workloadRow.textContent()).toContain('running');

    await workloadRow.locator('a').click();
    const log = page.locator(`[data-log="${workloadId}"]`);
    await expect.poll(() => log.textContent(), { timeout: 120_000 }).toContain('dashboard line <b>one</b>');
    // The markup in the log line stayed text.
    expect(await log.locator('b').count()).toBe(0);
    await page.close();
  });

  it('creates a join token shown once, renders its description as text, and revokes it', async () => {
    const page = await signIn(cp.ownerKey);
    await page.click('a[href="#/tokens"]');
    const description = '<img src=x onerror="window.__pwned=1"> rack 7';
    await page.fill('[data-form="join-token"] input[name="description"]', description);
    await page.click('[data-form="join-token"] button[type="submit"]');
    const install = page.locator('[data-install]');
    await install.waitFor();
    const { join_tokens: tokens } = (
      await cp.call<{
        join_tokens: { id: string; description: string | null; prefix: string; status: string }[];
      }>('GET', '/v2/admin/hosts/join-tokens')
    ).body;
    const token = tokens.find((t) => t.description === description);
    expect(token).toBeDefined();
    expect(await install.textContent()).toContain(token!.prefix);
    // The one-line install, as the join-token answer prints it (issue 20).
    expect(await install.textContent()).toMatch(
      /^curl -fsSL http:\/\/127\.0\.0\.1:\d+\/install\.sh \| sudo sh -s -- --join-token anvjt_[\w-]+$/,
    );
    const row = page.locator(`[data-token="${token!.id}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain(description);
    expect(await page.evaluate('window.__pwned')).toBeUndefined();

    await row.locator('[data-action="revoke"]').click();
    await waitFor('join token revoked through the dashboard', async () => {
      const list = await cp.call<{ join_tokens: { id: string; status: string }[] }>(
        'GET',
        '/v2/admin/hosts/join-tokens',
      );
      return list.body.join_tokens.find((t) => t.id === token!.id)?.status === 'revoked';
    });
    await page.close();
  });

  it("lists every account's clusters, filtered by status", async () => {
    const accountId = newId('acc');
    const userId = newId('usr');
    const prisma = cp.context.db.prisma;
    await prisma.account.create({ data: { id: accountId, name: 'Customer <i>Co</i>', tier: 'pro' } });
    await prisma.user.create({ data: { id: userId, accountId, email: 'c@example.com', role: 'owner' } });
    await prisma.cluster.create({
      data: clusterRow({ id: 'cluster_dash_run', accountId, ownerId: userId, name: 'trainer', gpuCount: 2 }),
    });
    await prisma.cluster.create({
      data: clusterRow({
        id: 'cluster_dash_wait',
        accountId,
        ownerId: userId,
        name: 'waiting',
        status: 'pending',
        gpuCount: 8,
        queuedAt: new Date(Date.now() - 5 * 60_000),
      }),
    });
    const page = await signIn(cp.ownerKey);
    await page.click('a[href="#/clusters"]');
    const waiting = page.locator('[data-cluster="cluster_dash_wait"]');
    await waiting.waitFor();
    expect(await waiting.textContent()).toContain('Customer <i>Co</i>');
    expect(await waiting.textContent()).toContain('waiting for room since 5 min ago');
    expect(await page.textContent('[data-tile="gpus-waiting"] strong')).toBe('8');
    await page.selectOption('[data-view="clusters"] select[name="status"]', 'pending');
    await expect.poll(() => page.locator('[data-table="clusters"] tbody tr').count()).toBe(1);
    expect(await page.locator('[data-cluster="cluster_dash_run"]').count()).toBe(0);
    await page.close();
  });

  it('creates an account whose owner is invited, and changes its tier', async () => {
    const page = await signIn(cp.ownerKey);
    await page.click('a[href="#/accounts"]');
    await page.fill('[data-form="account"] input[name="name"]', 'Tenant One');
    await page.fill('[data-form="account"] input[name="ownerEmail"]', 'owner@tenant-one.example');
    await page.selectOption('[data-form="account"] select[name="tier"]', 'pro');
    await page.click('[data-form="account"] button[type="submit"]');
    const inviteUrl = (await page.locator('[data-invite-url]').textContent()) ?? '';
    const token = new URL(inviteUrl).pathname.split('/').pop();
    const accepted = await fetch(`${cp.url}/v2/accounts/team/invitations/${token}/accept`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(accepted.status).toBe(201);
    const account = await cp.context.db.prisma.account.findFirstOrThrow({ where: { name: 'Tenant One' } });
    expect(account.tier).toBe('pro');
    await page.reload();
    const row = page.locator(`[data-account="${account.id}"]`);
    await row.waitFor();
    await expect.poll(() => row.locator('td').nth(2).textContent()).toBe('1');
    await row.locator('select[name="tier"]').selectOption('enterprise');
    await waitFor('tier changed through the dashboard', async () => {
      const now = await cp.context.db.prisma.account.findUniqueOrThrow({ where: { id: account.id } });
      return now.tier === 'enterprise';
    });
    await page.close();
  });

  it('keeps the key in the tab only, and signing out forgets it', async () => {
    const page = await signIn(cp.ownerKey);
    await page.locator('[data-action="sign-out"]').waitFor();
    expect(await page.evaluate('document.cookie')).toBe('');
    expect(await page.evaluate('localStorage.length')).toBe(0);
    await page.click('[data-action="sign-out"]');
    await page.locator('[data-form="sign-in"]').waitFor();
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
    await page.close();
    expect(pageErrors).toEqual([]);
  });
});
